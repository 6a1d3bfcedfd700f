"""Helpers for the vault tests: a brain with kernels, vectors of exact cosine, a clean store."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from nika_brain.brain import Brain
from nika_brain.federation.vault import chroma
from tests.kit.brain import make_brain

DIM = 384


def vault_brain(root: Path, kernels=("alpha", "beta", "gamma"), extra: str = "") -> Brain:
    brain = make_brain(root, "version: 1\nlock_poll: 0.01\n" + extra)
    for k in kernels:
        (brain.kernels_dir / k).mkdir(parents=True, exist_ok=True)
        (brain.kernels_dir / k / "kernel.yml").write_text(f"id: {k}\ngoal: goal of {k}\n")
    chroma.reset_cache()
    return brain


def reset_store(brain: Brain) -> None:
    from nika_brain.federation.vault.store import drop_all
    drop_all(brain)


def axis(i: int) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[i] = 1.0
    return v


def at_cosine(base: int, other: int, cos: float) -> np.ndarray:
    """A unit vector whose cosine with axis(base) is exactly `cos` (to float32 precision)."""
    return (cos * axis(base) + np.sqrt(1.0 - cos * cos) * axis(other)).astype(np.float32)


def write_pdf(path: Path, pages: list[str]) -> Path:
    """A small valid PDF, one text line per page (Helvetica), written by hand so the test needs no
    PDF writer; pypdf reads it back."""
    objs: list[bytes] = []
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    font = 3 + 2 * n
    objs.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objs.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    for i, text in enumerate(pages):
        safe = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        stream = f"BT /F1 12 Tf 72 720 Td ({safe}) Tj ET".encode("latin-1")
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                    f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode())
        objs.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    objs.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))
    return path


_P = ("Alice", "Bruno", "Chloé", "Dmitri", "Elena", "Farid", "Gaspard", "Hana", "Ilya", "Jade")
_C = ("Lyon", "Nantes", "Berlin", "Osaka", "Lille", "Porto", "Quito", "Rennes", "Dakar", "Oslo")
_D = ("the backup server", "a temperature sensor", "the firewall", "the invoice batch",
      "the tender dossier", "the patent draft", "the GPU node", "the mail relay", "the VPN gateway",
      "the CI runner")
_V = ("failed", "restarted", "was upgraded", "ran out of disk", "was audited", "missed its deadline",
      "was rolled back", "doubled its latency", "was approved", "lost its certificate")
_E = ("a power cut", "the quarterly audit", "a client escalation", "the migration to K3s",
      "a heat wave", "the new contract", "a DNS outage", "the benchmark campaign",
      "a security review", "the holiday freeze")
_A = ("Next step: open a ticket.", "We must call the vendor.", "Budget impact is unknown.",
      "Nobody was on call.", "The logs are attached.", "A fix is scheduled for Monday.",
      "Root cause is still open.", "Customers noticed it.", "It happened twice this month.",
      "The runbook was outdated.")


def prose(seed: int) -> str:
    """A deterministic incident note per seed (varied enough that few pairs pass 0.95)."""
    import random
    r = random.Random(seed)
    return (f"{r.choice(_P)} in {r.choice(_C)} reported that {r.choice(_D)} {r.choice(_V)} after "
            f"{r.choice(_E)} (ticket {r.randint(100, 9999)}). {r.choice(_A)} {r.choice(_A)}")
