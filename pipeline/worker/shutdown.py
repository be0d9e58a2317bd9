"""A stop that always ends: SIGTERM/SIGINT start a deadline after which the process exits at once.

Faust's orderly stop waits for every delivered message to be acked, which the
flush loop does once MongoDB commits; with the broker or the store unreachable
that wait (and Faust's own broker calls) can last forever. The deadline runs on a
thread of its own, so it fires even if the event loop is stuck. Exiting then is
safe: nothing uncommitted was acked, so it is consumed again after a restart
(docs/exactly-once.md); the log says how many events that is.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import faust

log = logging.getLogger("preagg.worker")

#: Exit status of a worker that reached its shutdown deadline with work uncommitted.
EXIT_SHUTDOWN_DEADLINE = 76


class BoundedWorker(faust.Worker):
    """Faust's worker, plus a deadline on stopping once a stop signal arrived."""

    def __init__(self, *args: Any, shutdown_timeout: float, left: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shutdown_timeout = shutdown_timeout
        self._left = left
        self._deadline: threading.Timer | None = None

    def _schedule_shutdown(self, sig: signal.Signals) -> None:
        if self._deadline is None and self._shutdown_timeout > 0:
            log.info("%s received: stopping within %.0fs", sig.name, self._shutdown_timeout)
            self._deadline = threading.Timer(self._shutdown_timeout, self._expire)
            self._deadline.daemon = True
            self._deadline.start()
        super()._schedule_shutdown(sig)

    def _expire(self) -> None:
        try:
            left = self._left()
        except Exception as exc:  # reading the flushers from another thread must not block the exit
            left = f"unknown ({exc})"
        log.error(
            "shutdown took more than %.0fs (broker or store unreachable?); exiting now with %s "
            "uncommitted: it is consumed again on restart",
            self._shutdown_timeout,
            left,
        )
        logging.shutdown()
        os._exit(EXIT_SHUTDOWN_DEADLINE)
