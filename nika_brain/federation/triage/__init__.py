"""Triage (seed: "Le triage RAG sémantique"): which kernel a prompt goes to.

Public face: `decide` (Triage: the decision, splits, fallback, data policy), `goals` (the goals index:
kernels' goals, tags and canonical prompts as vectors, calibration), `router` (the model that scores a
prompt against the goals), `bench` (the `triage bench` contract), `hint` (the wrong-kernel hint of the
UserPromptSubmit hook).
"""
