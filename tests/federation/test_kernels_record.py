"""The kernel record (kernels/<id>/kernel.yml): the extended schema, old files, bad values."""
from __future__ import annotations

import dataclasses

import pytest

from nika_brain.errors import BrainError
from nika_brain.state import kernels


def _write(brain, kid, text):
    d = brain.kernels_dir / kid
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.yml").write_text(text, encoding="utf-8")


def test_round_trip_keeps_every_field(brain):
    k = kernels.new_kernel("beta-lab", "R&D for the lab", tags=["rnd", "patents"],
                           examples=["benchmark sWELU"], scope=["lab/", "docs/lab.md"], memory="1G",
                           cpu="50%", region="fr", data_class="sensitive", doctrine="explore freely",
                           restart="on-failure", max_restarts=2, temporary=True, ttl="2h")
    saved = kernels.save_kernel(brain, k)
    back = kernels.load_kernel(brain, "beta-lab")
    assert back == saved
    assert back.limits.memory_bytes == 1 << 30 and back.limits.cpu_percent == 50.0
    assert back.ttl == 7200.0 and back.status == "starting" and back.created is not None
    assert (saved.path.stat().st_mode & 0o777) == 0o600
    assert (saved.folder.stat().st_mode & 0o777) == 0o700
    frozen = dataclasses.replace(back, status="active")
    assert frozen.status == "active" and back.status == "starting"
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.status = "dead"  # type: ignore[misc]


def test_an_old_kernel_yml_still_loads(brain):
    _write(brain, "alpha", "id: alpha\ngoal: Operate the IT\ntags: [it]\ncard: satellite-boot\n"
                           "status: handed-over\nparent: zero\nsomething_newer: 1\n")
    k = kernels.load_kernel(brain, "alpha")
    assert (k.status, k.parent, k.runtime, k.limits.memory_bytes, k.scope) == \
        ("handed-over", "zero", "tmux", None, ())


@pytest.mark.parametrize("value,unit", [("512M", 512 << 20), ("1.5Gi", 3 << 29), ("2G", 2 << 30),
                                        (67108864, 64 << 20)])
def test_memory_units(value, unit):
    assert kernels.parse_memory(value) == unit


@pytest.mark.parametrize("value,pct", [("50%", 50.0), ("1.5", 150.0), ("500m", 50.0), (2, 200.0)])
def test_cpu_units(value, pct):
    assert kernels.parse_cpu(value) == pct


@pytest.mark.parametrize("text,needle", [
    ("id: a\ngoal: g\nlimits: {memory: lots}\n", "memory limit does not parse"),
    ("id: a\ngoal: g\nlimits: {cpu: '0%'}\n", "cpu limit out of range"),
    ("id: a\ngoal: g\nlimits: {disk: 1G}\n", "unknown key"),
    ("id: a\ngoal: '  '\n", "goal cannot be empty"),
    ("id: a\ngoal: g\nstatus: zombie\n", "must be one of"),
    ("id: a\ngoal: g\nscope: [../etc]\n", "inside the brain"),
    ("id: a\ngoal: g\nttl: soon\n", "ttl does not parse"),
])
def test_bad_values_name_file_and_key(brain, text, needle):
    _write(brain, "a", text)
    with pytest.raises(BrainError) as exc:
        kernels.load_kernel(brain, "a")
    assert needle in str(exc.value) and "kernel.yml" in str(exc.value)


def test_new_kernel_refuses_bad_input():
    for kwargs, needle in [({"goal": "x" * 600}, "at most"), ({"memory": "1Q"}, "does not parse"),
                           ({"runtime": "docker"}, "unknown runtime"), ({"temporary": True}, "ttl"),
                           ({"goal": ""}, "empty")]:
        args = {"goal": "ok", **kwargs}
        with pytest.raises(BrainError, match=needle):
            kernels.new_kernel("k1", args.pop("goal"), **args)
    with pytest.raises(BrainError, match="kernel id"):
        kernels.new_kernel("bad id!", "ok")


def test_an_id_is_made_from_the_goal_when_none_is_given(brain):
    from nika_brain.federation.kernels import verbs
    assert verbs._auto_id(brain, "Opérer l'IT de BCUB3, vite !") == "k-operer-l-it-de-bcub3"
    (brain.kernels_dir / "k-operer-l-it-de-bcub3").mkdir(parents=True)
    assert verbs._auto_id(brain, "Opérer l'IT de BCUB3, vite !") == "k-operer-l-it-de-bcub3-2"
    assert kernels.check_id(verbs._auto_id(brain, "!!!")) == "k"
