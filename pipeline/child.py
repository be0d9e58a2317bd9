"""``preagg`` subcommands run from Python as child processes (workers, servers), with a log file each.

The demo, the tests and the benchmarks start real processes, not threads, so
SIGTERM and kill -9 mean what they say.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

from pipeline.settings import Settings


class ChildProcess:
    """One ``python -m pipeline ARGS`` child logging to ``<home>/logs/<name>.log``."""

    def __init__(self, settings: Settings, args: list[str], name: str, tree: Path | None = None) -> None:
        self.settings = settings
        self.args = args
        self.name = name
        #: Another checkout to run from (benchmarks compare trees side by side).
        self.tree = tree
        self.log_path = Path(settings.home) / "logs" / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def spawn(self, env: dict[str, str] | None = None) -> None:
        """Start the child in a session of its own, appending to its log."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", *self.args],
            env={**os.environ, **self.settings.to_env(), **(env or {})},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.tree,
        )

    @property
    def pid(self) -> int:
        """Process id (the child must have been started)."""
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM (the child stops in order); KILL if it does not within ``timeout``. The exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self._close()

    def kill(self) -> int:
        """SIGKILL the child's process group: a crash, nothing flushed."""
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
