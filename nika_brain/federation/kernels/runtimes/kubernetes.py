"""The kubernetes runtime: a Namespace and a Pod per kernel, with the kernel's hard limits as the Pod's
resources (requests = limits: the Guaranteed class, so the node's cgroups enforce them).

The Pod gets the brain: an init container clones the brain's remote at the base branch into the
volume the agent works in (`brain_remote`, else the URL of the `sync.remote` git remote), or a
PersistentVolumeClaim holding it (`brain_volume`). Its credentials are a Secret made from the
kernel's `credentials.env` and applied straight to the cluster (`kubectl apply -f -`): never written
into the brain. The kernel's region is a required node affinity (`region_label`, default
topology.kubernetes.io/region), so a `region: fr` kernel cannot be scheduled elsewhere. It is ready
when its agent's session has started (a readiness probe running `nika-brain kernel ready <id>`).

The manifests are always rendered to `kernels/<id>/kubernetes.yaml` (Secret excluded); they are applied
with `kubectl` only when `federation.kubernetes.context` names a context. Without one the kernel stays
`starting` and the record says so. Prompts are not delivered to a Pod by this runtime yet; invoke says so.

    federation:
      kubernetes: {context: my-k3s, image: registry/nika-kernel:1, namespace_prefix: nika-os-,
                   brain_remote: git@host:brain.git, git_image: alpine/git:2.45.2}
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
DEFAULT_GIT_IMAGE = "alpine/git:2.45.2"
REGION_LABEL = "topology.kubernetes.io/region"
SECRET = "kernel-credentials"
BRAIN_MOUNT = "/brain"
_DNS = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _k8s(brain: Brain) -> dict:
    return dict(options.get(brain, "kubernetes"))


def k8s_name(kernel_id: str, prefix: str = "nika-os-") -> str:
    name = (prefix + kernel_id).lower().replace("_", "-").replace(".", "-")
    if len(name) > 63 or not _DNS.match(name):
        raise BrainError(f"kernel id {kernel_id!r} cannot be a Kubernetes name ({name!r}: lowercase "
                         "letters, digits and '-', at most 63)")
    return name


def brain_source(brain: Brain) -> tuple[str, str]:
    """('remote', url) to clone, or ('volume', claim name); refused when the pod could get no brain."""
    cfg = _k8s(brain)
    if cfg.get("brain_volume"):
        return "volume", str(cfg["brain_volume"])
    if cfg.get("brain_remote"):
        return "remote", str(cfg["brain_remote"])
    from nika_brain.gitrepo import git
    remote = str((brain.config.sync or {}).get("remote", "origin"))
    proc = git.run(brain.root, "remote", "get-url", remote, check=False)
    if proc.returncode == 0 and proc.stdout.strip():
        return "remote", proc.stdout.strip()
    raise BrainError("the kubernetes runtime needs the brain in the pod: set federation.kubernetes.brain_remote "
                     f"(a git URL) or brain_volume (a PersistentVolumeClaim), or add git remote {remote}")


def _volume_and_init(brain: Brain) -> tuple[dict, list[dict]]:
    kind, where = brain_source(brain)
    if kind == "volume":
        return {"name": "brain", "persistentVolumeClaim": {"claimName": where}}, []
    clone = {"name": "brain-clone", "image": str(_k8s(brain).get("git_image", DEFAULT_GIT_IMAGE)),
             "args": ["clone", "--depth=1", "--branch", brain.config.base_branch, where, BRAIN_MOUNT],
             "volumeMounts": [{"name": "brain", "mountPath": BRAIN_MOUNT}],
             "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
    return {"name": "brain", "emptyDir": {}}, [clone]


def _affinity(brain: Brain, kernel: Kernel) -> dict | None:
    if not kernel.region:
        return None
    key = str(_k8s(brain).get("region_label", REGION_LABEL))
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": [kernel.region]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def secret_manifest(brain: Brain, kernel: Kernel) -> dict:
    """The kernel's credentials as a Secret, built in memory from credentials.env (never on disk)."""
    from nika_brain.federation.kernels.limits import read_env_file
    ns = k8s_name(kernel.id, str(_k8s(brain).get("namespace_prefix", "nika-os-")))
    data = read_env_file(kernel_dir(brain, kernel.id) / "credentials.env")
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": SECRET, "namespace": ns}, "stringData": dict(data)}


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
    volume, init = _volume_and_init(brain)
    container = {
        "name": "agent", "image": str(cfg.get("image", DEFAULT_IMAGE)), "command": command,
        "workingDir": f"{BRAIN_MOUNT}/kernels/{kernel.id}", "env": env, "stdin": True, "tty": True,
        "envFrom": [{"secretRef": {"name": SECRET}}],
        "volumeMounts": [{"name": "brain", "mountPath": BRAIN_MOUNT}],
        "readinessProbe": {"exec": {"command": ["python3", "-m", "nika_brain", "kernel", "ready", kernel.id]},
                           "periodSeconds": 5, "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
    }
    if res:
        container["resources"] = {"limits": dict(res), "requests": dict(res)}
    spec: dict = {"restartPolicy": "OnFailure" if kernel.restart == "on-failure" else "Never",
                  "automountServiceAccountToken": False, "volumes": [volume], "containers": [container]}
    if init:
        spec["initContainers"] = init
    affinity = _affinity(brain, kernel)
    if affinity:
        spec["affinity"] = affinity
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "kernel", "namespace": ns, "labels": labels,
                        "annotations": {"nika-brain/goal": kernel.goal[:200]}},
           "spec": spec}
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

    def _kubectl(self, brain: Brain, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
        ctx = _k8s(brain).get("context")
        try:
            return subprocess.run(["kubectl", "--context", str(ctx), *args], capture_output=True,
                                  text=True, timeout=60, input=input)
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
        import json
        s = self._kubectl(brain, "apply", "-f", "-", input=json.dumps(secret_manifest(brain, kernel)))
        if s.returncode != 0:
            raise BrainError(f"kubectl apply of the credentials Secret failed: "
                             f"{(s.stderr or s.stdout).strip().splitlines()[-1:]}")
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
