"""The kubernetes runtime: a Namespace and a Pod per kernel, with the kernel's hard limits as the Pod's
resources (requests = limits: the Guaranteed class, so the node's cgroups enforce them).

The manifests are always rendered to `kernels/<id>/kubernetes.yaml`; they are applied with `kubectl`
only when `federation.kubernetes.context` names a context. Without one the kernel stays `starting`
and the record says so. Prompts are not delivered to a Pod by this runtime yet (its agent is expected
to take work from the bus); invoke says so clearly.

    federation:
      kubernetes: {context: my-k3s, image: registry/nika-kernel:1, namespace_prefix: nika-os-}
"""
from __future__ import annotations

import re
import shutil
import subprocess

from nika_brain.brain import Brain
from nika_brain.errors import BrainError
from nika_brain.federation import options
from nika_brain.federation.kernels.runtimes import Launch, Liveness, RuntimeMissing
from nika_brain.state.kernels import Kernel, kernel_dir

DEFAULT_IMAGE = "nika-brain/kernel:latest"
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _k8s(brain: Brain) -> dict:
    return dict(options.get(brain, "kubernetes"))


def k8s_name(kernel_id: str, prefix: str = "nika-os-") -> str:
    name = (prefix + kernel_id).lower().replace("_", "-").replace(".", "-")
    if len(name) > 63 or not _DNS.match(name):
        raise BrainError(f"kernel id {kernel_id!r} cannot be a Kubernetes name ({name!r}: lowercase "
                         "letters, digits and '-', at most 63)")
    return name


def render(brain: Brain, kernel: Kernel) -> list[dict]:
    """The Namespace and the Pod of one kernel, as data (dumped as a multi-document YAML)."""
    cfg = _k8s(brain)
    ns = k8s_name(kernel.id, str(cfg.get("namespace_prefix", "nika-os-")))
    labels = {"app.kubernetes.io/name": "nika-kernel", "app.kubernetes.io/managed-by": "nika-brain",
              "nika-brain/kernel": k8s_name(kernel.id, "")}
    if kernel.region:
        labels["nika-brain/region"] = kernel.region.lower()
    res: dict = {}
    if kernel.limits.memory_bytes is not None:
        text = kernel.limits.memory or str(kernel.limits.memory_bytes)  # "1G" is 2**30 for us
        res["memory"] = text + "i" if text[-1] in "KMGT" else text    # and "1Gi" for Kubernetes
    if kernel.limits.cpu_percent is not None:
        res["cpu"] = f"{max(1, round(kernel.limits.cpu_percent * 10))}m"
    env = [{"name": "NIKA_KERNEL_ID", "value": kernel.id}]
    command = list(options.get(brain, "agent_command"))
    container = {
        "name": "agent", "image": str(cfg.get("image", DEFAULT_IMAGE)), "command": command,
        "workingDir": f"/brain/kernels/{kernel.id}", "env": env, "stdin": True, "tty": True,
        "envFrom": [{"secretRef": {"name": "kernel-credentials", "optional": True}}],
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    if res:
        container["resources"] = {"limits": dict(res), "requests": dict(res)}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "kernel", "namespace": ns, "labels": labels,
                        "annotations": {"nika-brain/goal": kernel.goal[:200]}},
           "spec": {"restartPolicy": "OnFailure" if kernel.restart == "on-failure" else "Never",
                    "automountServiceAccountToken": False, "containers": [container]}}
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
    return [namespace, pod]


def manifest_path(brain: Brain, kernel_id: str):
    return kernel_dir(brain, kernel_id) / "kubernetes.yaml"


def write_manifests(brain: Brain, kernel: Kernel) -> str:
    from nika_brain.support.yamlsafe import dumps
    text = "---\n".join(dumps(d) for d in render(brain, kernel))
    path = manifest_path(brain, kernel.id)
    brain.write(path, text)
    return str(path)


class KubernetesRuntime:
    name = "kubernetes"

    def missing(self, brain: Brain) -> str | None:
        """Rendering needs nothing; applying (a context configured) needs kubectl."""
        if _k8s(brain).get("context") and not shutil.which("kubectl"):
            return "kubectl is not installed (needed to apply to context " \
                   f"{_k8s(brain).get('context')!r})"
        return None

    def _kubectl(self, brain: Brain, *args: str) -> subprocess.CompletedProcess:
        ctx = _k8s(brain).get("context")
        try:
            return subprocess.run(["kubectl", "--context", str(ctx), *args], capture_output=True,
                                  text=True, timeout=60)
        except FileNotFoundError as exc:
            raise RuntimeMissing("kubectl is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise BrainError(f"kubectl {args[0]} timed out") from exc

    def start(self, brain: Brain, kernel: Kernel, launch: Launch) -> dict:  # noqa: ARG002
        path = write_manifests(brain, kernel)
        if not _k8s(brain).get("context"):
            return {"manifests": path, "applied": False}
        p = self._kubectl(brain, "apply", "-f", path)
        if p.returncode != 0:
            raise BrainError(f"kubectl apply failed: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
        return {"manifests": path, "applied": True}

    def alive(self, brain: Brain, kernel: Kernel, state: dict) -> Liveness:
        if not state.get("applied"):
            return Liveness(True, None, None, "manifests rendered, not applied (no context)")
        ns = k8s_name(kernel.id, str(_k8s(brain).get("namespace_prefix", "nika-os-")))
        p = self._kubectl(brain, "get", "pod", "kernel", "-n", ns, "-o", "jsonpath={.status.phase}")
        phase = p.stdout.strip()
        return Liveness(p.returncode == 0 and phase in ("Pending", "Running"), None, None, phase)

    def deliver(self, brain: Brain, kernel: Kernel, state: dict, prompt: str,  # noqa: ARG002
                launch: Launch) -> dict:  # noqa: ARG002
        raise BrainError(f"kernel {kernel.id}: the kubernetes runtime does not take prompts from "
                         "`kernel invoke` (its agent reads work from the bus); the prompt stays queued")

    def stop(self, brain: Brain, kernel: Kernel, state: dict, grace: float) -> None:
        if state.get("applied"):
            ns = k8s_name(kernel.id, str(_k8s(brain).get("namespace_prefix", "nika-os-")))
            self._kubectl(brain, "delete", "namespace", ns, f"--grace-period={int(grace)}",
                          "--wait=false")
