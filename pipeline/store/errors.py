"""Which store failures mean "this commit is too big or too slow" (retry smaller, not the same).

Codes from MongoDB's ``src/mongo/base/error_codes.yml``. A transaction that
outlives ``transactionLifetimeLimitSeconds`` is aborted by the server and the next
statement or the commit gets ``NoSuchTransaction`` (the embedded store reports
its idle expiry the same way); one whose writes do not fit the storage engine's
cache gets ``TransactionTooLargeForCache`` (MongoDB 6.2+ does not retry it). An
unreachable store is *not* such a failure: splitting a batch does not help a
store that is down, so those errors are retried as they are.
"""

from __future__ import annotations

from pymongo.errors import OperationFailure, PyMongoError, ServerSelectionTimeoutError

#: Server error codes that a smaller or shorter transaction avoids.
SHRINK_CODES = frozenset(
    {
        50,  # MaxTimeMSExpired: the deadline passed on the server
        251,  # NoSuchTransaction: the transaction expired (lifetime or idle) and was aborted
        257,  # TransactionTooLarge
        262,  # ExceededTimeLimit
        290,  # TransactionExceededLifetimeLimitSeconds
        388,  # TransactionTooLargeForCache
        10334,  # BSONObjectTooLarge
    }
)


class CommitTooLarge(Exception):
    """A flush's updates exceed the commit byte bound; raised before anything is written."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size:,} bytes of updates exceed the commit bound of {limit:,}")
        self.size = size
        self.limit = limit


class StoreUnreachable(PyMongoError):
    """The store did not answer the ping that opens every commit: nothing was sent.

    Splitting does not help a store that is down, so this is retried as it is. Told
    apart by where it happened, not by its message (a long host name pushed the
    word "connect" out of the part of the message once read).
    """


class DuplicateKeyUnresolved(PyMongoError):
    """Upserts still refused with a duplicate key after bounded rounds of reading their documents.

    Not "already applied": their documents lack the marks. The flusher's retry (logged,
    metered, backed off) runs the flush again; its writes are idempotent.
    """


def shrinks(exc: BaseException) -> bool:
    """True when a smaller batch is the remedy: too large, or timed out while the store answered."""
    if isinstance(exc, CommitTooLarge):
        return True
    if isinstance(exc, StoreUnreachable | ServerSelectionTimeoutError):
        return False  # no server to talk to: size is not the problem
    if isinstance(exc, OperationFailure) and exc.code in SHRINK_CODES:
        return True
    # Client-side deadline (timeoutMS / pymongo.timeout) passed mid-commit, after the
    # store answered the commit's ping: the commit was too slow.
    return isinstance(exc, PyMongoError) and exc.timeout


def outcome_unknown(exc: BaseException) -> bool:
    """True when a failed commit may have applied (its outcome must be read before a split).

    Only a refusal sent before anything was written is certain: the byte bound, and
    the ping. Any other failure may have happened during or after ``commitTransaction``.
    """
    return not isinstance(exc, CommitTooLarge | StoreUnreachable)
