"""The multi-kernel federation: kernels' runtimes, triage, the shared vault, work stealing, handover.

Never imported on the hook path (PreToolUse); each submodule imports its heavy dependencies
(numpy, chromadb, onnxruntime) lazily, where a call needs them. Its settings live under the
`federation:` key of nika-brain.yml and are validated here, not in brain.py.
"""
