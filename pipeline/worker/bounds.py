"""How large a batch may grow before it is sealed: bounded in documents and bytes, adapted to time.

Pure state, no I/O. The flusher asks :meth:`CommitBound.full` after every message
and tells :meth:`CommitBound.committed` / :meth:`CommitBound.failed` the outcome of
every commit. The document limit starts at ``max_docs``; a commit slower than
``target_seconds`` lowers it in proportion, a failure that a smaller transaction
avoids halves it below the failed batch, and fast commits let it grow back by a
quarter at a time. Bytes are estimated from the batch's documents and the bytes
per document of recent commits (the store reports the real figure). The estimate
may be wrong in either direction when documents change shape (a backfill after a
live stream); the sink refuses a commit over the byte bound before writing, and
the batch is split.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The document limit never goes below this (a single message may still exceed it).
MIN_DOCS = 16


@dataclass
class CommitBound:
    """The adaptive sealing rule of one stream's batches."""

    max_docs: int
    max_bytes: int
    target_seconds: float
    docs_limit: int = 0
    #: Bytes of update statements per document, as measured (0: nothing measured yet).
    bytes_per_doc: float = 0.0

    def __post_init__(self) -> None:
        if self.docs_limit <= 0:
            self.docs_limit = self.max_docs

    def full(self, docs: int, step: int = 0) -> bool:
        """True when a batch planning ``docs`` documents must be sealed.

        ``step``: documents the last message added, the guess for the next one. A batch
        is sealed when one more such message would pass a bound, so that batches end
        below the bounds, not one (packed) message above them.
        """
        ahead = docs + step
        if ahead > self.docs_limit or docs >= self.docs_limit:
            return True
        return self.bytes_per_doc > 0 and ahead * self.bytes_per_doc > self.max_bytes

    def committed(self, docs: int, size: int, seconds: float) -> None:
        """Learn from a successful commit: its bytes per document, and whether it took too long."""
        if docs > 0 and size > 0:
            per_doc = size / docs
            self.bytes_per_doc = (
                per_doc if self.bytes_per_doc == 0 else 0.7 * self.bytes_per_doc + 0.3 * per_doc
            )
        if seconds > self.target_seconds and docs > MIN_DOCS:
            wanted = int(docs * self.target_seconds / seconds * 0.9)
            if wanted < self.docs_limit:
                self.docs_limit = max(MIN_DOCS, wanted)
        elif seconds < self.target_seconds / 2 and docs >= self.docs_limit // 2:
            self.docs_limit = min(self.max_docs, max(self.docs_limit + 1, int(self.docs_limit * 1.25)))

    def failed(self, docs: int, size: int = 0) -> None:
        """A commit of ``docs`` documents failed for its size or duration: aim at half of it.

        ``size``: the bytes the store measured when it refused the commit for its size,
        a better estimate of the bytes per document than recent successes.
        """
        self.docs_limit = max(MIN_DOCS, min(self.docs_limit, docs // 2))
        if docs > 0 and size > 0:
            self.bytes_per_doc = max(self.bytes_per_doc, size / docs)
