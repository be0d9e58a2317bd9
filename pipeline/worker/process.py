"""Worker processes run from Python: the demo, the tests and the benchmarks start real
``preagg worker`` processes (not threads), so SIGTERM and kill -9 mean what they say."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from pipeline.settings import Settings


class WorkerProcess:
    """One ``python -m pipeline worker`` child with its own log file."""

    def __init__(self, settings: Settings, name: str = "worker", tree: Path | None = None) -> None:
        self.settings = settings
        self.name = name
        #: Another checkout to run the worker from (benchmarks compare trees side by side).
        self.tree = tree
        self.log_path = Path(settings.home) / "logs" / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> WorkerProcess:
        """Spawn the worker; it logs to ``<home>/logs/<name>.log``."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        env = {**os.environ, **self.settings.to_env(), "PREAGG_WORKER_ID": self.name}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "worker"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.tree,
        )
        return self

    @property
    def pid(self) -> int:
        """Process id (the worker must have been started)."""
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM (the worker flushes, commits and exits); KILL if it does not within ``timeout``."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self._close()

    def kill(self) -> int:
        """SIGKILL the worker's process group: a crash, nothing flushed."""
        assert self.proc is not None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return self._close()

    def _close(self) -> int:
        if self._log is not None:
            self._log.close()
            self._log = None
        assert self.proc is not None
        return self.proc.returncode if self.proc.returncode is not None else -1
