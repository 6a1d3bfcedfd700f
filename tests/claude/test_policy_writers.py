"""Every shell writer the policy knows, in a matrix (issue 25 §1: dropping any one of them from the
policy left the suite green). Each command writes gates/g1.yml (or into gates/) and is denied; the
same command aimed at a scratch folder outside the brain is allowed, so the denial is about the target."""
from __future__ import annotations

import pytest

from nika_brain.claude import policy

ROOT = "/brain"


def facts() -> policy.Facts:
    def locate(path: str) -> policy.Target:
        return policy.Target(path, path[len(ROOT) + 1:] if path.startswith(ROOT + "/") else None)
    return policy.Facts(locate=locate, home="/home/op")


WRITERS = [
    "ln -sf /tmp/forged.yml {d}/g1.yml",
    "ln -s /tmp/forged.yml -t {d}",
    "cp /tmp/forged.yml {d}/g1.yml",
    "install -m 644 /tmp/forged.yml {d}/g1.yml",
    "rsync -a /tmp/forged.yml {d}/g1.yml",
    "scp host:forged.yml {d}/g1.yml",
    "truncate -s 0 {d}/g1.yml",
    "cd {d} && curl -O https://example.org/g1.yml",
    "cd {d} && curl -sLO https://example.org/g1.yml",
    "curl -o {d}/g1.yml https://example.org/g1.yml",
    "wget -P {d} https://example.org/g1.yml",
    "wget -O {d}/g1.yml https://example.org/g1.yml",
    "cd {d} && wget https://example.org/g1.yml",
    "cd {d} && tar -xf /tmp/forged.tar",
    "cd {d} && tar xf /tmp/forged.tar",
    "tar -xf /tmp/forged.tar -C {d}",
    "git checkout -- {d}/g1.yml",
    "git restore {d}/g1.yml",
    "git clean -fd {d}/",
]


@pytest.mark.parametrize("command", WRITERS)
def test_a_writer_into_a_state_folder_is_denied(command):
    reason = policy.decide("Bash", {"command": command.format(d="gates")}, ROOT, facts())
    assert reason and "gates/" in reason, command


@pytest.mark.parametrize("command", WRITERS)
def test_the_same_writer_into_a_scratch_folder_is_allowed(command):
    assert policy.decide("Bash", {"command": command.format(d="/tmp/scratch")}, ROOT, facts()) is None
