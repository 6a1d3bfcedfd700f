"""Spawning (seed: "Conditions de spawn d'un nouveau kernel"): triggers propose, only a human disposes.

Public face: `triggers` (saturation, topic diversity, doctrine conflicts, `/kernel new`), `proposals`
(the gated spawn proposals: list, approve, reject).
"""
