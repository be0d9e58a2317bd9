"""Ending a worker at once: the last words never wait for a logging lock another thread holds."""

from __future__ import annotations

import io
import logging
import threading

from pipeline.worker import exits


def test_last_words_skip_a_handler_whose_lock_another_thread_holds() -> None:
    held, free = io.StringIO(), io.StringIO()
    blocked, ok = logging.StreamHandler(held), logging.StreamHandler(free)
    logger = logging.getLogger("preagg.worker")
    logger.addHandler(blocked)
    logger.addHandler(ok)
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with blocked.lock:  # type: ignore[union-attr]
            taken.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    taken.wait(30)
    try:
        exits._log_nonblocking("fenced; exiting")  # returns although one handler is locked
        exits._flush_handlers()
    finally:
        release.set()
        t.join()
        logger.removeHandler(blocked)
        logger.removeHandler(ok)
    assert "fenced; exiting" in free.getvalue() and held.getvalue() == ""


def test_exit_hooks_run_before_the_exit_and_a_failing_one_does_not_stop_it(monkeypatch: object) -> None:
    import os

    calls: list[str] = []
    ended: list[int] = []

    def bad(timeout: float) -> None:
        calls.append("bad")
        raise RuntimeError("broker gone")

    def good(timeout: float) -> None:
        calls.append(f"good {timeout}")

    saved = list(exits._hooks)
    exits._hooks[:] = [bad, good]
    real_exit = os._exit
    os._exit = lambda status: ended.append(status)  # type: ignore[assignment]
    try:
        exits.exit_now(exits.EXIT_FENCED, "test exit")
    finally:
        os._exit = real_exit
        exits._hooks[:] = saved
    assert calls == ["bad", f"good {exits.LEAVE_TIMEOUT}"] and ended == [75]


def test_a_crash_arms_the_stop_deadline_once() -> None:
    """A stop that no signal started (Faust crashed) used to have no deadline at all."""
    import asyncio

    import faust

    from pipeline.worker.shutdown import BoundedWorker

    app = faust.App("t-crash", broker="kafka://127.0.0.1:1", web_enabled=False, autodiscover=False)
    w = BoundedWorker(
        app, quiet=True, redirect_stdouts=False, loglevel="warning", shutdown_timeout=3600, left=lambda: "x"
    )
    assert w._deadline is None
    asyncio.run(w.crash(RuntimeError("boom")))
    first = w._deadline
    try:
        assert first is not None and first.daemon and first.is_alive()
        w.arm("SIGTERM")  # a signal after the crash does not start a second deadline
        assert w._deadline is first
    finally:
        if first is not None:
            first.cancel()


def test_the_signal_handler_arms_the_deadline_before_the_event_loop_runs() -> None:
    """A Python-level handler runs between bytecodes: a loop busy with a batch does not delay it."""
    import asyncio
    import os
    import signal

    import faust

    from pipeline.worker.shutdown import BoundedWorker

    app = faust.App("t-signal", broker="kafka://127.0.0.1:1", web_enabled=False, autodiscover=False)
    w = BoundedWorker(
        app, quiet=True, redirect_stdouts=False, loglevel="warning", shutdown_timeout=3600, left=lambda: "x"
    )
    stopped: list[str] = []
    w._schedule_shutdown = lambda sig: stopped.append(sig.name)  # type: ignore[method-assign]
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}

    async def busy() -> bool:
        w.install_signal_handlers()
        os.kill(os.getpid(), signal.SIGTERM)
        armed = False
        for _ in range(200_000):  # no await: the event loop does not get to its handler
            if w._deadline is not None:
                armed = True
                break
        await asyncio.sleep(0.1)  # now it does
        return armed

    loop = asyncio.new_event_loop()
    w.loop = loop  # type: ignore[misc]
    try:
        armed = loop.run_until_complete(busy())
    finally:
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(s)
            signal.signal(s, old[s])
        loop.close()
        if w._deadline is not None:
            w._deadline.cancel()
    assert armed and stopped == ["SIGTERM"]


def test_restarts_in_place_are_bounded_per_window() -> None:
    """An exit 75 restarts the worker in place, at most 5 times in 10 minutes."""
    recent = ""
    for i in range(exits.MAX_RESTARTS):
        allowed, recent = exits.next_restart(recent, 1000.0 + i)
        assert allowed
    allowed, kept = exits.next_restart(recent, 1010.0)
    assert not allowed and kept == recent  # the sixth in the window: exit 75 for someone to look
    allowed, _ = exits.next_restart(recent, 1000.0 + exits.RESTART_WINDOW + 5)
    assert allowed  # the old ones have aged out
