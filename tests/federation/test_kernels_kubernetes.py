"""The kubernetes runtime's manifests: a Namespace and a Pod per kernel with the kernel's hard limits
(requests = limits), the brain cloned by an init container, credentials as a Secret, the region as a
node affinity; rendered at spawn, applied only when a context is configured. kubectl's client-side
validation needs an API server for discovery, so it cannot run offline: the manifests are validated
here against the Kubernetes OpenAPI schema (the `kubernetes-validate` package ships it) and the
naming rules. Nothing here was run on a real cluster (none is reachable from this machine)."""
from __future__ import annotations

import json
import re

import kubernetes_validate
import pytest

from nika_brain.errors import BrainError
from nika_brain.federation.kernels.runtimes import kubernetes
from nika_brain.state import kernels

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
QUANTITY = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|m)?$")


def _spawn(cli, brain, *extra):
    (brain.root / "nika-brain.yml").write_text("version: 1\nfederation: " + json.dumps(
        {"supervisor": "manual", "kubernetes": {"image": "registry.local/nika-kernel:1",
                                                "brain_remote": "https://git.example.invalid/brain.git"}}) + "\n")
    return cli("kernel", "spawn", "Edge controller", "--runtime", "kubernetes", *extra)


def test_spawn_renders_namespace_and_pod_with_hard_limits(brain, cli):
    out = _spawn(cli, brain, "--id", "delta_iot.edge", "--memory", "1G", "--cpu", "50%",
                 "--region", "fr", "--restart", "on-failure")
    assert out.returncode == 0, out.stderr
    k = kernels.load_kernel(brain, "delta_iot.edge")
    assert k.status == "starting" and k.enforcement == "kubernetes"
    assert "no kubectl context" in k.status_reason
    text = kubernetes.manifest_path(brain, k.id).read_text()
    docs = [load_file_text(d) for d in text.split("---\n")]
    ns, pod = docs
    assert ns["kind"] == "Namespace" and pod["kind"] == "Pod"
    assert ns["apiVersion"] == pod["apiVersion"] == "v1"
    assert ns["metadata"]["name"] == pod["metadata"]["namespace"] == "nika-os-delta-iot-edge"
    for name in (ns["metadata"]["name"], pod["metadata"]["name"]):
        assert DNS1123.match(name) and len(name) <= 63
    for value in ns["metadata"]["labels"].values():
        assert len(value) <= 63 and re.match(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", value)
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"] == c["resources"]["requests"] == {"memory": "1Gi", "cpu": "500m"}
    assert all(QUANTITY.match(v) for v in c["resources"]["limits"].values())
    assert c["image"] == "registry.local/nika-kernel:1" and pod["spec"]["restartPolicy"] == "OnFailure"
    assert {"name": "NIKA_KERNEL_ID", "value": "delta_iot.edge"} in c["env"]
    assert "own-secret" not in text and ns["metadata"]["labels"]["nika-brain/region"] == "fr"
    for doc in (ns, pod):
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    init = pod["spec"]["initContainers"][0]
    assert init["args"][-2:] == ["https://git.example.invalid/brain.git", "/brain"]
    assert "--branch" in init["args"]
    assert {"name": "brain", "mountPath": "/brain"} in c["volumeMounts"]
    assert c["workingDir"] == "/brain/kernels/delta_iot.edge"
    affinity = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert affinity["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "topology.kubernetes.io/region", "operator": "In", "values": ["fr"]}]}]
    assert c["readinessProbe"]["exec"]["command"][-3:] == ["kernel", "ready", "delta_iot.edge"]
    assert c["envFrom"] == [{"secretRef": {"name": "kernel-credentials"}}]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    # no context configured: nothing applied, and an invoke says why (the prompt stays queued)
    inv = cli("kernel", "invoke", "delta_iot.edge", "read the sensors")
    assert inv.returncode == 1 and "kubernetes runtime" in inv.stderr and inv.stderr.count("\n") == 1
    assert cli("kernel", "kill", "delta_iot.edge", "--reason", "done").returncode == 0


def load_file_text(text: str):
    import yaml
    return yaml.safe_load(text)


def test_names_that_cannot_be_kubernetes_names(brain):
    k = kernels.new_kernel("x" * 60, "g")
    with pytest.raises(BrainError, match="Kubernetes name"):
        kubernetes.render(brain, k)


def test_missing_kubectl_with_a_context_is_exit_7(brain, cli, tmp_path):
    env_path = tmp_path / "bin"
    env_path.mkdir()
    import os
    import sys
    os.symlink(sys.executable, env_path / "python3")
    (brain.root / "nika-brain.yml").write_text(
        "version: 1\nfederation: {supervisor: manual, kubernetes: {context: k3s-prod}}\n")
    out = cli("kernel", "spawn", "Edge", "--id", "k8", "--runtime", "kubernetes", env={"PATH": str(env_path)})
    assert out.returncode == 7 and "kubectl is not installed" in out.stderr and "k3s-prod" in out.stderr
    assert not kernels.kernel_dir(brain, "k8").exists(), "nothing half-created"


def test_the_credentials_secret_is_valid_and_never_written_into_the_brain(brain, cli, tmp_path):
    env = tmp_path / "creds.env"
    env.write_text("ANTHROPIC_API_KEY=sk-test-secret-1234\nREGION_TOKEN='a b'\n")
    out = _spawn(cli, brain, "--id", "gamma")
    assert out.returncode == 0, out.stderr
    k = kernels.load_kernel(brain, "gamma")
    (kernels.kernel_dir(brain, "gamma") / "credentials.env").write_text(env.read_text())
    secret = kubernetes.secret_manifest(brain, k)
    kubernetes_validate.validate(secret, kubernetes_validate.latest_version(), strict=True)
    assert secret["stringData"] == {"ANTHROPIC_API_KEY": "sk-test-secret-1234", "REGION_TOKEN": "a b"}
    assert secret["metadata"] == {"name": "kernel-credentials", "namespace": "nika-os-gamma"}
    assert "sk-test" not in kubernetes.manifest_path(brain, "gamma").read_text()


def test_a_pod_with_no_way_to_get_the_brain_is_refused_and_a_volume_is_mounted_when_given(brain, cli):
    (brain.root / "nika-brain.yml").write_text("version: 1\nfederation: {supervisor: manual, kubernetes: {}}\n")
    out = cli("kernel", "spawn", "Edge", "--id", "nobrain", "--runtime", "kubernetes")
    assert out.returncode == 1 and "needs the brain in the pod" in out.stderr and out.stderr.count("\n") == 1
    (brain.root / "nika-brain.yml").write_text(
        "version: 1\nfederation: {supervisor: manual, kubernetes: {brain_volume: brain-pvc}}\n")
    from nika_brain.brain import Brain
    k = kernels.new_kernel("vol", "g")
    ns, pod = kubernetes.render(Brain.at(brain.root), k)
    kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    assert pod["spec"]["volumes"] == [{"name": "brain", "persistentVolumeClaim": {"claimName": "brain-pvc"}}]
    assert "initContainers" not in pod["spec"] and "affinity" not in pod["spec"]


def test_kernel_ready_is_the_agents_session_started(brain, cli):
    from nika_brain.state import sessions
    out = _spawn(cli, brain, "--id", "rdy")
    assert out.returncode == 0, out.stderr
    waiting = cli("kernel", "ready", "rdy")
    assert waiting.returncode == 1 and "no session started" in waiting.stderr
    sessions.bind(brain, "sess-rdy-1", kernel="rdy", claim=None, source="startup")
    assert cli("kernel", "ready", "rdy").returncode == 0
    assert cli("kernel", "ready", "nope").returncode == 1
