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
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import faust

from pipeline.core.logs import LogFormat, configure
from pipeline.worker.exits import EXIT_SHUTDOWN_DEADLINE, exit_now

log = logging.getLogger("preagg.worker")


class BoundedWorker(faust.Worker):
    """Faust's worker, plus a deadline on stopping, armed as early as possible.

    The deadline is armed by a Python-level signal handler (run by the interpreter
    between two bytecodes of the main thread, even while the event loop is busy with a
    long batch), not by the loop's handler, which runs only when the loop gets to it.
    asyncio still sees the signal through its wakeup descriptor, so Faust's orderly
    stop begins as before. A stop without a signal (Faust crashed, the app returned)
    arms it too. It then runs on a thread of its own.
    """

    def __init__(
        self,
        *args: Any,
        shutdown_timeout: float,
        left: Callable[[], str],
        log_format: LogFormat = "text",
        log_flushes: bool = False,
        closing: Sequence[Callable[[], Awaitable[None]]] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        #: Run once the app has stopped: a client left open keeps its monitor tasks, which
        #: the worker's exit then waits for (about 2 s) before cancelling them.
        self._closing = closing
        self._log_format: LogFormat = log_format
        self._log_flushes = log_flushes
        self._shutdown_timeout = shutdown_timeout
        self._left = left
        self._deadline: threading.Timer | None = None
        self._arm_lock = threading.Lock()

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        """Preagg's lines in ``PREAGG_LOG_FORMAT``; Faust's and aiokafka's INFO kept out of them."""
        super().on_setup_root_logger(logger, level)
        configure(logger, level, self._log_format, self._log_flushes)
        log.info("starting: joining the consumer group")

    async def on_shutdown(self) -> None:
        await super().on_shutdown()
        for close in self._closing:
            try:
                await close()
            except Exception as exc:  # closing must never hold the exit
                log.warning("closing at exit failed: %s: %s", type(exc).__name__, exc)

    def install_signal_handlers(self) -> None:
        super().install_signal_handlers()
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(sig)

            def handler(signum: int, frame: Any, previous: Any = previous) -> None:
                self.arm(signal.Signals(signum).name)
                if callable(previous):
                    previous(signum, frame)

            signal.signal(sig, handler)

    def arm(self, why: str) -> None:
        """Start the stop deadline (once): past it the process exits whatever it waits for."""
        with self._arm_lock:
            if self._deadline is not None or self._shutdown_timeout <= 0:
                return
            self._deadline = threading.Timer(self._shutdown_timeout, self._expire)
            self._deadline.daemon = True
            self._deadline.start()
        log.info("%s: stopping within %.0fs", why, self._shutdown_timeout)

    async def crash(self, reason: BaseException) -> None:
        self.arm(f"crash ({type(reason).__name__})")
        await super().crash(reason)

    def stop_and_shutdown(self) -> None:
        self.arm("stop")
        super().stop_and_shutdown()

    def _expire(self) -> None:
        try:
            left = self._left()
        except Exception as exc:  # reading the flushers from another thread must not block the exit
            left = f"unknown ({exc})"
        exit_now(
            EXIT_SHUTDOWN_DEADLINE,
            f"shutdown took more than {self._shutdown_timeout:.0f}s (broker or store unreachable?); "
            f"exiting now with {left} uncommitted: it is consumed again on restart",
        )
