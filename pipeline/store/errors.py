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

from collections.abc import Mapping
from typing import Any

from pymongo.errors import (
    BulkWriteError,
    OperationFailure,
    PyMongoError,
    ServerSelectionTimeoutError,
    WriteConcernError,
)

from pipeline.core.commit import CommitTooLarge, Failure
from pipeline.core.errors import Undecidable

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


class NotDurable(PyMongoError):
    """A write the store answered with a write concern error: it may have applied on the primary,
    but no majority has it, so a failover can roll it back ("Rollbacks During Replica Set
    Failover", MongoDB's manual). Never counted, acked or finished on: the flush is retried.

    It wins over any write error beside it: a duplicate key that comes with a write concern
    error says the document exists on the primary, not that it will survive.
    """


def write_concern_error(exc: BaseException) -> Mapping[str, Any] | None:
    """The write concern error a failed write carries, alone or beside write errors (``None``: none).

    PyMongo raises a single statement's write error before its write concern error, and puts
    both in a bulk write's details: every place that reads an error as "already there" asks this
    first.
    """
    if isinstance(exc, BulkWriteError):
        found = exc.details.get("writeConcernErrors") or []
        return found[0] if found else None
    if isinstance(exc, WriteConcernError):
        return exc.details or {"errmsg": str(exc)}
    if isinstance(exc, OperationFailure):
        found = (exc.details or {}).get("writeConcernError")
        return found if isinstance(found, Mapping) else None
    return None


def check_durable(exc: BaseException, what: str) -> None:
    """Raise :class:`NotDurable` from ``exc`` when it carries a write concern error."""
    wce = write_concern_error(exc)
    if wce is not None:
        raise NotDurable(
            f"{what}: the store applied it but no majority acknowledged it "
            f"({wce.get('codeName', 'code')} {wce.get('code', '?')}: {str(wce.get('errmsg', ''))[:160]}); "
            "it may be rolled back, so it is written again"
        ) from exc


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


#: Write errors that the same statement meets again however often it is sent: the document or
#: the update is at fault, not the store's state (MongoDB's ``error_codes.yml``).
PERMANENT_CODES = {
    2: "BadValue",
    9: "FailedToParse",
    13: "Unauthorized",  # the user lacks a privilege: an operator grants it
    14: "TypeMismatch",  # $inc on a field a manual edit made a string
    20: "IllegalOperation",
    28: "PathNotViable",  # a path through a field that is not a document
    40: "ConflictingUpdateOperators",
    52: "DollarPrefixedFieldName",
    56: "EmptyFieldName",
    57: "DottedFieldName",
    61: "ShardKeyNotFound",  # an upsert on a sharded collection without its whole shard key
    66: "ImmutableField",
    72: "InvalidOptions",
    115: "CommandNotSupported",
    166: "CommandNotSupportedOnView",  # a view where a collection was expected
    10334: "BSONObjectTooLarge",  # a document over 16 MB
    17419: "DocumentTooLarge",  # "Resulting document after update is larger than 16777216"
}


def permanent(exc: BaseException) -> str | None:
    """What makes a failed write permanent (sending it again cannot help), or ``None``.

    A bulk write is permanent when one of its write errors is: the others are retried with
    it, and a retry that fixed them would still meet that one. A transaction's
    ``BSONObjectTooLarge`` is the transaction's size (:func:`shrinks`), not a document's.
    """
    if isinstance(exc, Undecidable):
        return str(exc)
    if isinstance(exc, BulkWriteError):
        for e in exc.details.get("writeErrors", []):
            name = PERMANENT_CODES.get(int(e.get("code", 0)))
            if name is not None:
                doc = (e.get("op") or {}).get("q", {}).get("_id")
                return f"{name} (code {e.get('code')}) writing {doc!r}: {str(e.get('errmsg', ''))[:200]}"
        return None
    if isinstance(exc, OperationFailure) and exc.code in PERMANENT_CODES and exc.code != 10334:
        return f"{PERMANENT_CODES[exc.code]} (code {exc.code}): {str(exc)[:200]}"
    return None


#: A transaction aborted because another one wrote the same document.
WRITE_CONFLICT = 112


def is_write_conflict(exc: BaseException) -> bool:
    """A transaction aborted because another one wrote the same document (MongoDB code 112).

    Not the TransientTransactionError label: network errors inside a transaction carry it too."""
    return getattr(exc, "code", None) == WRITE_CONFLICT


def mongo_failure(exc: BaseException) -> Failure:
    """What a failed MongoDB call means to a flusher, in the commit port's words."""
    return Failure(
        shrinks=shrinks(exc),
        outcome_unknown=outcome_unknown(exc),
        permanent=permanent(exc),
        write_conflict=is_write_conflict(exc),
        too_large=exc.size if isinstance(exc, CommitTooLarge) else 0,
    )
