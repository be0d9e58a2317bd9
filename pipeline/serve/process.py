"""``preagg serve`` run from Python as a child process (``make dashboard``, tests, benchmarks)."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.child import ChildProcess
from pipeline.settings import Settings


class ServeProcess(ChildProcess):
    """One ``python -m pipeline serve`` child; :attr:`url` once it listens."""

    def __init__(
        self, settings: Settings, port: int = 0, name: str = "serve", tree: Path | None = None
    ) -> None:
        super().__init__(settings, ["serve", "--port", str(port)], name, tree)
        self.url = ""

    def start(self, timeout: float = 30.0) -> ServeProcess:
        """Spawn the server (port 0: any free one) and wait for the URL it prints."""
        self.log_path.unlink(missing_ok=True)
        self.spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            for line in self.log_path.read_text(errors="replace").splitlines():
                if line.startswith("dashboard "):
                    self.url = line.split()[1]
                    return self
            time.sleep(0.1)
        self.terminate()
        log = self.log_path.read_text(errors="replace")
        raise RuntimeError(f"preagg serve did not start:\n{log[-3000:]}")
