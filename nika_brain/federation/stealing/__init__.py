"""Work stealing (seed: "Work-stealing entre kernels"): an idle kernel takes waiting work from another.

Public face: `protocol` (task_available / task_claim / one atomic grant, the Worker, per-kernel queues),
`aptitude` (how well a kernel's goal fits a task).
"""
