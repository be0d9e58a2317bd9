"""What the packed BSON forms share (saved open visits, forwarded hits): a block of fixed-size
rows with its names listed once, cut into documents under a byte bound, and checked when read
(pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def fitting(
    items: Sequence[T], encode: Callable[[Sequence[T], int], bytes], max_bytes: int, index: int = 0
) -> list[bytes]:
    """``items`` encoded as one document (``index``: its place among the documents), or halves
    of them until each fits ``max_bytes``; one item alone may pass it."""
    one = encode(items, index)
    if len(one) <= max_bytes or len(items) <= 1:
        return [one]
    first = fitting(items[: len(items) // 2], encode, max_bytes, index)
    return first + fitting(items[len(items) // 2 :], encode, max_bytes, index + len(first))


def rows_per_document(max_bytes: int, dtype: np.dtype[Any]) -> int:
    """Rows a document of ``max_bytes`` is first tried with: room for as many bytes of names as of rows."""
    return max(1, max_bytes // (2 * dtype.itemsize))


def block_problem(doc: Mapping[str, Any], dtype: np.dtype[Any], what: str) -> str | None:
    """What is wrong with a decoded document's name lists (``sites``, ``pages``) and row block."""
    for name in ("sites", "pages"):
        names = doc.get(name)
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            return f"{name} is not a list of strings"
    rows = doc.get("rows")
    if not isinstance(rows, bytes) or len(rows) % dtype.itemsize:
        return f"rows are not whole {dtype.itemsize}-byte {what}"
    return None
