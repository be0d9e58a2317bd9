"""``preagg serve`` run from Python as a child process (the dashboard target, tests, benchmarks)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from pipeline.settings import Settings


class ServeProcess:
    """One ``python -m pipeline serve`` child, logging to ``<home>/logs/<name>.log``."""

    def __init__(self, settings: Settings, port: int = 0, name: str = "serve") -> None:
        self.settings = settings
        self.port = port
        self.url = ""
        self.log_path = Path(settings.home) / "logs" / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, timeout: float = 30.0) -> ServeProcess:
        """Spawn the server (``port`` 0: any free one) and wait for the URL it prints."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        env = {**os.environ, **self.settings.to_env()}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "serve", "--port", str(self.port)],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if line.startswith("dashboard "):
                    self.url = line.split()[1]
                    return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            "preagg serve did not start:\n" + self.log_path.read_text(errors="replace")[-3000:]
        )

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL past ``timeout``; the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode
