"""A document as MongoDB gives it back after a ``$set`` (pure): unit tests and benchmarks without a store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.updates import put_path


def as_read(value: Any) -> Any:
    """``value`` as PyMongo reads it back: BinData of subtype 0 as ``bytes``, nested ones too."""
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, Mapping):
        return {k: as_read(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_read(v) for v in value]
    return value


def after_set(stored: Mapping[str, Any] | None, paths: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` after ``{"$set": paths}`` (dotted paths create their sub-documents), as read back."""
    doc: dict[str, Any] = as_read(dict(stored or {}))
    for path, value in paths.items():
        put_path(doc, path, as_read(value))
    return doc
