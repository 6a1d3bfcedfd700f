"""nika-brain: run many coding-agent sessions from one git-native brain repository."""

__version__ = "0.1.0"
