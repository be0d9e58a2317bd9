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
from collections.abc import Callable

log = logging.getLogger("preagg.worker")

#: Exit status of a worker that must resume from MongoDB's positions (fenced, or reset).
EXIT_FENCED = 75
#: Exit status of a worker that reached its shutdown deadline with work uncommitted.
EXIT_SHUTDOWN_DEADLINE = 76
#: Seconds the LeaveGroup request may take before the process exits anyway.
LEAVE_TIMEOUT = 3.0

_hooks: list[Callable[[float], None]] = []


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
