"""Kernels (seed: "un kernel par /goal", "cinq verbes"): one kernel per goal, its folder, runtime and limits.

Public face: `verbs` (kernel_spawn, kernel_invoke, kernel_readjust, kernel_observe, kernel_kill),
`runtimes` (the Runtime protocol and registry: tmux, headless, kubernetes), `limits` (cgroups/rlimits),
`sandbox` (the bubblewrap wall), `credentials` and `claude_config` (a kernel's key and Claude Code config),
`supervisor` and `watchdog` (liveness, restarts, ttl), `health` (heartbeats), `status` (federation
status), `leases` (Redis path leases), `acl` (per-kernel Redis users). A kernel's prompt queue is a
brain file kind: `nika_brain.state.prompts`.
"""
