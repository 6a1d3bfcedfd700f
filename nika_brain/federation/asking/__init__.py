"""Asking (seed: "Un prompt utilisateur arrivant sur la fédération doit être routé vers le bon kernel"):
`nika-brain ask` triages a prompt and delivers it -- to one kernel, each part of a split to its kernel,
or to the generalist on a fallback -- and brings the answers back.

Public face: `record` (list_asks, load_ask: every ask as recorded, for the CLI and the console) and
`route` (ask: triage, deliver, wait).
"""
