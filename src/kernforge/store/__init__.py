"""store: the run folder, the one place every later stage and the user read from."""

from kernforge.store.run import RUN_FORMAT, RunStore, list_runs

__all__ = ["RUN_FORMAT", "RunStore", "list_runs"]
