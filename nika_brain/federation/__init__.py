"""The multi-kernel federation, one room per section of the seed (000_…txt):

- `kernels/`  — "Le pattern : un kernel par /goal" and "Lifecycle : cinq verbes": the five verbs, runtimes
  (tmux, headless, kubernetes), hard limits, the supervisor, health and heartbeats, the prompt queue,
  status, Redis leases and ACLs.
- `triage/`   — "Le triage RAG sémantique": the goals index, the router model, the decision (splits,
  fallback, data policy), the benchmark contract and the wrong-kernel hint.
- `vault/`    — "Le RAG partagé": the Chroma store, scoped records, grants, dedup, super-chunks,
  the hierarchy and daily summaries.
- `stealing/` — "Work-stealing entre kernels": the task protocol and the aptitude score.
- `lineage/`  — "Auto-handover via session_registry": the session registry and the handover.
- `spawning/` — "Conditions de spawn d'un nouveau kernel": the triggers and the gated proposals.
- `doors/`    — the walls between kernels: one unix socket per kernel to the vault, summaries and bus.
- `asking/`   — "Un prompt utilisateur arrivant sur la fédération doit être routé vers le bon kernel":
  `nika-brain ask` (triage, delivery, answers).
- `daemon/`   — the federation running by itself (`federation up`): a host of services over all rooms.

Loose modules shared by several rooms: `options` (the `federation:` settings), `embedding` (the
embedders), `overview` (the federation section of BRAIN-INDEX.md and `kernel observe`), `resident`
(the client of the daemon's socket).

Rooms import each other only through the modules their `__init__` names, and only downwards: vault,
triage, stealing, overview, kernels, spawning/doors, lineage, asking, daemon (the ranks are the table
`ROOMS` of tests/architecture/test_layers.py, which checks them, and docs/ARCHITECTURE.md).
Never imported on the hook path (PreToolUse); heavy dependencies (numpy, chromadb, onnxruntime) are
imported lazily where a call needs them. Settings live under `federation:` in nika-brain.yml and are
validated here, not in brain.py.
"""
