"""Command modules written in parallel register here once they exist."""
import importlib

for _name in ("index", "workflow", "claude", "bus", "kernel"):
    try:
        importlib.import_module(f"{__package__}.{_name}")
    except ModuleNotFoundError as exc:  # only a module that is not written yet may be missing
        if exc.name != f"{__package__}.{_name}":
            raise
