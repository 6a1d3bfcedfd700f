"""Kernels (seed: "un kernel par /goal", "cinq verbes"): one kernel per goal, its folder, runtime and limits.

Public face: `verbs` (kernel_spawn, kernel_invoke, kernel_readjust, kernel_observe, kernel_kill),
`runtimes` (the Runtime protocol and registry: tmux, headless, kubernetes), `limits` (cgroups/rlimits),
`supervisor` (liveness, restarts, ttl), `health` (heartbeats), `queue` (prompts waiting for a kernel),
`status` (federation status), `leases` (Redis path leases), `acl` (per-kernel Redis users).
"""
