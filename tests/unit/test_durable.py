"""A write concern error means "not durable", wherever it appears (alone, beside duplicate keys)."""

from __future__ import annotations

import pytest
from pymongo.errors import BulkWriteError, DuplicateKeyError, WriteConcernError

from pipeline.store.errors import NotDurable, check_durable, permanent, write_concern_error

WCE = {"code": 64, "codeName": "WriteConcernFailed", "errmsg": "waiting for replication timed out"}
DUP = {"index": 0, "code": 11000, "errmsg": "E11000 duplicate key error"}


def test_a_write_concern_error_beside_duplicate_keys_is_not_durable() -> None:
    exc = BulkWriteError({"writeErrors": [DUP], "writeConcernErrors": [WCE], "nInserted": 0})
    assert write_concern_error(exc) == WCE
    with pytest.raises(NotDurable, match="no majority acknowledged"):
        check_durable(exc, "a bulk write")
    assert permanent(exc) is None  # retried, never escalated as the document's fault


def test_duplicate_keys_alone_and_other_errors_pass() -> None:
    check_durable(BulkWriteError({"writeErrors": [DUP], "writeConcernErrors": []}), "a bulk write")
    check_durable(DuplicateKeyError("E11000", 11000, {"code": 11000}), "an upsert")
    check_durable(ValueError("x"), "anything")


def test_single_statement_errors_carry_theirs_in_details() -> None:
    assert write_concern_error(WriteConcernError("timed out", 64, WCE)) == WCE
    beside = DuplicateKeyError("E11000", 11000, {"code": 11000, "writeConcernError": WCE})
    with pytest.raises(NotDurable):
        check_durable(beside, "an intent")


def test_an_upsert_without_its_shard_key_is_permanent() -> None:
    """No retry mends ShardKeyNotFound: it is escalated as the other permanent errors are."""
    refused = {
        "index": 0,
        "code": 61,
        "errmsg": "could not extract exact shard key",
        "op": {"q": {"_id": "d"}},
    }
    reason = permanent(BulkWriteError({"writeErrors": [refused], "writeConcernErrors": []}))
    assert reason is not None and reason.startswith("ShardKeyNotFound (code 61)")
