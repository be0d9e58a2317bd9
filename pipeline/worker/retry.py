"""Every store and broker call of a flush, retried: backoff, write conflicts, the commit token,
permanent errors.

A flush never gives up on a batch by itself (exactly-once: the batch stays unacked and is
retried while the store is away), so each retry is logged with what it holds, counted
(``preagg_flush_retries_total``), and bounded in its pause (``max_backoff``). Two kinds
of failure are more than transient:

* a **write conflict** (MongoDB code 112: two workers' transactions wrote one document, as
  keyless streams do) makes the stream's commits take its *commit token* first for
  :data:`CONTENDED_SECONDS`, so that a conflict costs one statement;
* a **permanent** write error (the store's ``Failure.permanent``) met
  :data:`PERMANENT_ATTEMPTS` times in a row is escalated: an ERROR saying what to do,
  ``/health/ready`` failing and a PROBLEM in ``preagg status`` until it goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence

from pipeline.core.commit import TP, Classify, FenceConflict
from pipeline.worker.accounting import FlushStats

log = logging.getLogger("preagg.flush")

#: Attempts of a write that fails with a permanent error (the store says so: ``Failure.permanent``)
#: before it is escalated: logged as an ERROR with what to do, ``/health/ready`` failing and a
#: PROBLEM in ``preagg status``. It is still retried (at the longest backoff), so that an
#: operator's fix of the document lets the flush through without a restart.
PERMANENT_ATTEMPTS = 5
#: Exceptions only a programming error raises: escalated like a permanent write error (the same
#: call fails the same way again), while still retried: never retried unseen.
BUGS = (TypeError, AttributeError, NameError, AssertionError, KeyError, IndexError)


def bug(exc: BaseException) -> str | None:
    """What makes a failure the code's own error, or ``None``."""
    return f"a bug, {type(exc).__name__}: {str(exc)[:200]}" if isinstance(exc, BUGS) else None


#: After a write conflict, a stream's commits take its commit token first for this long
#: (seconds since the last conflict): workers that write the same documents (keyless
#: streams) then meet on one statement instead of halfway through their upserts.
CONTENDED_SECONDS = 300.0
#: Longest pause before retrying a commit that lost a write conflict: with the token the
#: conflict cost one statement, and a waiter must poll often to catch the token free.
CONFLICT_MAX_PAUSE = 0.5
#: A worker that just committed with the token waits this long (jittered) before taking it
#: again, so that workers waiting for it get their turn (measured: without the pause one
#: worker's batch waited 67 s while the others committed back to back).
TOKEN_HANDOFF = 0.6

#: Records a permanent write error (``None``: cleared) on the ledgers of some partitions.
OnStuck = Callable[[Sequence[TP], str | None], Awaitable[None]]


class Retrier:
    """Runs one stream's store and broker calls until they succeed."""

    def __init__(
        self,
        stream: str,
        stats: FlushStats,
        max_backoff: float,
        on_stuck: OnStuck | None,
        classify: Classify,
    ) -> None:
        self.stream = stream
        #: The store's reading of its own failures (the commit port's ``Sink.failure``).
        self.classify = classify
        self.stats = stats
        self.max_backoff = max_backoff
        #: Records (or clears, ``None``) a permanent write error on the partitions' ledgers, for status.
        self.on_stuck = on_stuck
        #: A permanent write error met :data:`PERMANENT_ATTEMPTS` times in a row, escalated
        #: (``/health/ready`` fails, ``preagg status`` shows a PROBLEM); ``None``: none.
        self.stuck: str | None = None
        self._permanent_in_a_row = 0
        #: Set by the commit's give-up rule when the failed commit is one message that cannot be split.
        self.unsplittable: str | None = None
        #: Monotonic time until which commits take the commit token (see CONTENDED_SECONDS).
        self._contended_until = 0.0
        #: Monotonic time the last commit that took the token ended.
        self._token_released = 0.0

    def contended(self) -> bool:
        """True while commits take the commit token (a write conflict in the last CONTENDED_SECONDS)."""
        return time.monotonic() < self._contended_until

    async def token(self) -> str | None:
        """The commit token to take for the next commit (``None``: none), after the hand-off pause."""
        token = self.stream if self.contended() else None
        if token is not None and time.monotonic() - self._token_released < TOKEN_HANDOFF:
            await asyncio.sleep(random.uniform(TOKEN_HANDOFF / 2, TOKEN_HANDOFF))
        self.stats.token_commits += token is not None
        return token

    def released(self, token: str | None) -> None:
        """A commit that took ``token`` ended (the next one by this worker waits its turn)."""
        if token is not None:
            self._token_released = time.monotonic()

    async def run(
        self,
        what: str,
        op: Callable[[], Awaitable[object]],
        events: int,
        give_up: Callable[[Exception], bool] | None = None,
        tps: Sequence[TP] = (),
    ) -> None:
        """Run ``op`` until it succeeds, logging and counting each failure, backing off.

        ``give_up`` may end the loop by re-raising a failure (the commit splits its batch).
        A permanent write error (the store's ``Failure.permanent``) met
        :data:`PERMANENT_ATTEMPTS` times in a row is escalated (:meth:`_escalate`).
        """
        delay = min(0.5, self.max_backoff)
        while True:
            try:
                await op()
                if tps and self.stuck is not None:
                    await self._unstick(tps)
                return
            except (asyncio.CancelledError, FenceConflict):
                raise
            except Exception as exc:  # any store/broker failure: keep the batch, back off
                if give_up is not None and give_up(exc):
                    raise
                failure = self.classify(exc)
                reason = (failure.permanent or self.unsplittable or bug(exc)) if tps else None
                self.unsplittable = None
                self._permanent_in_a_row = self._permanent_in_a_row + 1 if reason else 0
                if reason is not None and self._permanent_in_a_row == PERMANENT_ATTEMPTS:
                    await self._escalate(tps, reason)
                self.stats.retries += 1
                # Jittered: workers whose commits conflicted must not retry in step and meet again.
                pause = random.uniform(delay / 2, delay)
                if failure.write_conflict:
                    # Two workers write one document (keyless streams): from now on commits take
                    # the token first, so a conflict costs one statement and is retried soon.
                    # (Retrying full-size conflicts sooner was measured to make them worse.)
                    self.stats.write_conflicts += 1
                    if not self.contended():
                        log.warning(
                            "%s: write conflicts with another worker's commits on the same documents; "
                            "commits take the stream's commit token for the next %.0fs",
                            self.stream,
                            CONTENDED_SECONDS,
                        )
                    self._contended_until = time.monotonic() + CONTENDED_SECONDS
                    pause = random.uniform(0.05, min(delay, CONFLICT_MAX_PAUSE))
                log.warning(
                    "%s failed (%s: %s); %d events held unacked, retrying in %.1fs",
                    what,
                    type(exc).__name__,
                    str(exc)[:200],
                    events,
                    pause,
                )
                await asyncio.sleep(pause)
                delay = min(delay * 2, self.max_backoff)

    async def _escalate(self, tps: Sequence[TP], reason: str) -> None:
        """A write failed the same permanent way :data:`PERMANENT_ATTEMPTS` times: say so everywhere."""
        self.stuck = reason
        self.stats.permanent_errors += 1
        where = ", ".join(f"{t}[{p}]" for t, p in tps)
        log.error(
            "%s: a flush of %s fails for good: %s. Retrying stops helping: /health/ready fails and "
            "`preagg status` shows it until the document is fixed (or removed); the flush then goes "
            "through by itself (docs/operations.md, 'A flush the store refuses').",
            self.stream,
            where,
            reason,
        )
        if self.on_stuck is not None:
            with contextlib.suppress(Exception):  # best effort: the store may refuse this too
                await self.on_stuck(tps, f"{self.stream}: {reason}")

    async def _unstick(self, tps: Sequence[TP]) -> None:
        log.warning("%s: the flush that failed for good (%s) went through", self.stream, self.stuck)
        self.stuck = None
        self._permanent_in_a_row = 0
        if self.on_stuck is not None:
            with contextlib.suppress(Exception):
                await self.on_stuck(tps, None)
