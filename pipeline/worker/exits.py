"""Ending a worker process at once: leave the consumer group first, never block on logging.

A worker ends with ``os._exit`` when continuing would be wrong (fenced: exit 75) or
when its stop passed its deadline (exit 76): a clean Faust stop would ack and commit
what MongoDB never counted. Two things used to go wrong on the way out:

- Without a LeaveGroup the broker kept the dead member's partitions assigned until its
  session timed out, so they sat idle that long after every such exit. The registered
  hook (:func:`on_exit`, set by the worker app) sends LeaveGroup from the Kafka
  consumer's own thread and event loop, so it works even when the main loop is stuck,
  and gives up after :data:`LEAVE_TIMEOUT`.
- ``logging.shutdown()`` takes each handler's lock and can wait forever for a thread
  that holds one. Here each handler is flushed only if its lock is free within a
  moment, and the last line goes straight to file descriptor 2 as well.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable

from pipeline.core import errors
from pipeline.core.commit import LedgerBehind

log = logging.getLogger("preagg.worker")

#: Exit status of a worker that must resume from MongoDB's positions (fenced, or reset).
EXIT_FENCED = errors.EXIT_FENCED
#: Exit status of a worker that reached its shutdown deadline with work uncommitted.
EXIT_SHUTDOWN_DEADLINE = 76
#: Seconds the LeaveGroup request may take before the process exits anyway.
LEAVE_TIMEOUT = 3.0

#: Restarts in place (exit 75 outside a supervisor) allowed within :data:`RESTART_WINDOW` s.
MAX_RESTARTS = 5
RESTART_WINDOW = 600.0
#: The environment variable carrying the times of this worker's recent restarts across ``exec``.
RESTARTS_ENV = "PREAGG_WORKER_RESTARTS"

_hooks: list[Callable[[float], None]] = []
#: The command line that restarts this worker in place (``None``: exit, for a supervisor).
_restart_argv: list[str] | None = None


def restart_in_place(argv: list[str] | None) -> None:
    """Make an exit 75 re-run ``argv`` in this process (same PID) instead of ending it.

    ``preagg worker`` sets it unless ``--no-restart``: the README's ``preagg worker &`` has no
    supervisor, and an exit for "resume from MongoDB's positions" used to leave nothing running.
    """
    global _restart_argv
    _restart_argv = argv


def next_restart(recent: str, now: float) -> tuple[bool, str]:
    """Whether one more restart is allowed after those of ``recent`` (comma-separated epoch
    seconds), and the value to carry on (pure): at most :data:`MAX_RESTARTS` in
    :data:`RESTART_WINDOW` seconds, so a cause that comes back at once escalates to an exit."""
    times = [float(t) for t in recent.split(",") if t.strip()]
    times = [t for t in times if now - t < RESTART_WINDOW]
    if len(times) >= MAX_RESTARTS:
        return False, ",".join(f"{t:.0f}" for t in times)
    return True, ",".join(f"{t:.0f}" for t in [*times, now])


def on_exit(hook: Callable[[float], None]) -> None:
    """Run ``hook(timeout)`` before every :func:`exit_now` (the app's LeaveGroup)."""
    _hooks.append(hook)


def exit_now(status: int, message: str) -> None:
    """Log ``message`` (without blocking), leave the group, end the process with ``status``."""
    with contextlib.suppress(OSError):
        os.write(2, f"preagg worker: {message} (exit {status})\n".encode(errors="replace"))
    _log_nonblocking(message)
    for hook in _hooks:
        try:
            hook(LEAVE_TIMEOUT)
        except Exception as exc:  # best effort: the exit must happen whatever this does
            _log_nonblocking(f"leaving the consumer group failed: {type(exc).__name__}: {exc}")
    _flush_handlers()
    argv = _restart_argv
    if status == EXIT_FENCED and argv is not None:
        allowed, carried = next_restart(os.environ.get(RESTARTS_ENV, ""), time.time())
        n = len(carried.split(","))
        if allowed:
            note = f"preagg worker: restarting in place ({n} of {MAX_RESTARTS} in {RESTART_WINDOW:.0f}s)\n"
            with contextlib.suppress(OSError):
                os.write(2, note.encode())
            os.environ[RESTARTS_ENV] = carried
            try:
                os.execv(sys.executable, [sys.executable, *argv])
            except OSError as exc:
                os.write(2, f"preagg worker: could not restart ({exc})\n".encode(errors="replace"))
        else:
            with contextlib.suppress(OSError):
                os.write(
                    2,
                    f"preagg worker: {n} restarts within {RESTART_WINDOW:.0f}s; not again: exit {status} "
                    "for a supervisor or an operator (preagg status says why)\n".encode(),
                )
    elif status == EXIT_FENCED:
        with contextlib.suppress(OSError):
            os.write(2, b"preagg worker: --no-restart: its supervisor restarts it (or: preagg worker)\n")
    os._exit(status)


def _log_nonblocking(message: str) -> None:
    """One error record through handlers whose locks are free (skip any that is held)."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, (), None)
    for handler in _handlers():
        if handler.lock is None or handler.lock.acquire(timeout=0.5):
            try:
                handler.emit(record)
            except Exception:
                pass
            finally:
                if handler.lock is not None:
                    handler.lock.release()


def _flush_handlers() -> None:
    for handler in _handlers():
        if handler.lock is None or handler.lock.acquire(timeout=0.5):
            try:
                handler.flush()
            except Exception:
                pass
            finally:
                if handler.lock is not None:
                    handler.lock.release()


def _handlers() -> list[logging.Handler]:
    out: list[logging.Handler] = []
    logger: logging.Logger | None = log
    while logger is not None:
        out.extend(logger.handlers)
        logger = logger.parent if logger.propagate else None
    return out


def exit_to_resume(reason: str) -> None:
    """End the process at once (after leaving the group) so that its restart resumes from MongoDB."""
    exit_now(EXIT_FENCED, f"{reason}; exiting (status {EXIT_FENCED}) to resume from MongoDB's positions.")


def exit_fenced(conflict: Exception) -> None:
    """Default reaction to a failed fence (a :class:`~pipeline.core.commit.FenceConflict`): log,
    then end the process at once.

    ``os._exit`` skips Faust's shutdown on purpose: a clean stop would ack and commit
    the dropped batch's offsets. The supervisor (compose ``restart``, systemd, the
    chaos driver) restarts the worker; it rejoins the group and resumes from
    MongoDB's offsets.
    """
    if isinstance(conflict, LedgerBehind):
        exit_now(
            EXIT_FENCED, f"{conflict}. Dropped the batch unwritten; restarting with the partition held back"
        )
    exit_now(EXIT_FENCED, f"{conflict}; another worker owns these partitions now. Dropped the batch.")
