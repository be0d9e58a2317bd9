"""Damaged copies of a packed BSON form (saved open visits, forwarded hits), for the tests that
check every field is checked when read: a field changed, or a column of the packed block."""

from __future__ import annotations

from typing import Any

import bson
import numpy as np


def changed(raw: bytes, **fields: object) -> bytes:
    """``raw`` (one BSON document) with ``fields`` set."""
    doc = bson.decode(raw)
    doc.update(fields)
    return bson.encode(doc)


def rows_changed(raw: bytes, dtype: Any, **columns: object) -> bytes:
    """``raw`` with every row of its packed ``rows`` block (of ``dtype``) given ``columns``' values."""
    block = np.frombuffer(bson.decode(raw)["rows"], dtype=dtype).copy()
    for name, value in columns.items():
        block[name] = value
    return changed(raw, rows=bson.Binary(block.tobytes()))
