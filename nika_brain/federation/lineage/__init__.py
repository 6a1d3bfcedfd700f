"""Lineage (seed: "Auto-handover via session_registry"): sessions, their kernels and entities, successors.

Public face: `registry` (session -> kernel and entity; strategy -> project -> job -> task -> atomic),
`handover` (the hook handlers that hand a kernel over to its successor at the context threshold).
"""
