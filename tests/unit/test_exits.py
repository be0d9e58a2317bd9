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
