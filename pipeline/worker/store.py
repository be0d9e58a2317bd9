"""What a worker asks of its store, as the entry point hands it over (MongoDB: store/worker_store.py)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from pipeline.core.commit import WorkerSink


class Store(Protocol):
    """A worker's store: the sink its flushes commit to, and what its kinds and checks read."""

    @property
    def db(self) -> Any:
        """The database the kinds read and write besides flushes (their name stores, settlers)."""
        ...

    @property
    def sink(self) -> WorkerSink: ...

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """Failures a retry may cure."""
        ...

    async def prepare(self) -> None:
        """Checks before the first flush; raises a ``PreaggError`` the worker cannot run past."""
        ...

    async def record_assignment(self, member: str, held: list[str]) -> None:
        """What this member holds, for ``preagg status``: best effort."""
        ...

    async def close(self) -> None: ...


#: Makes the worker's store, given the fault hook its commits call (``None``: no fault injected).
MakeStore = Callable[[Callable[[str], None] | None], Store]
#: What runs before the worker joins its group: log lines, or a one-line refusal.
Ready = Callable[[], Coroutine[Any, Any, tuple[list[str], str | None]]]
