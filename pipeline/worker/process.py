"""Worker processes run from Python: the demo, the tests and the benchmarks start real
``preagg worker`` processes (not threads), so SIGTERM and kill -9 mean what they say."""

from __future__ import annotations

from pathlib import Path

from pipeline.child import ChildProcess
from pipeline.settings import Settings


class WorkerProcess(ChildProcess):
    """One ``python -m pipeline worker`` child with its own log file."""

    def __init__(
        self, settings: Settings, name: str = "worker", tree: Path | None = None, restart: bool = False
    ) -> None:
        # The harness is the supervisor (drills count exits 75 and restart): no restart in place.
        super().__init__(settings, ["worker"] if restart else ["worker", "--no-restart"], name, tree)

    def start(self) -> WorkerProcess:
        """Spawn the worker; it logs to ``<home>/logs/<name>.log``."""
        self.spawn({"PREAGG_WORKER_ID": self.name})
        return self
