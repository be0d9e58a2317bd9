"""A visitor sketch's share applied to a plain dict as MongoDB applies it (tests and benchmarks).

``$max``, ``$bit or`` and ``$addToSet`` on dotted paths, absent fields set: the stored form of
:mod:`pipeline.core.uniques` without a server, to measure and test it in memory.
"""

from __future__ import annotations

from typing import Any

from pipeline.core.uniques import REGISTERS, Fields


def holder_of(fields: Fields) -> str:
    """The holder a share is for (the first part of its paths): its registers go under its ``r``."""
    paths = [*fields.max, *fields.add_to_set]
    return paths[0].split(".")[0] if paths else "v"


def _parent(doc: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    *parents, last = path.split(".")
    at = doc
    for p in parents:
        at = at.setdefault(p, {})
    return at, last


def apply_share(doc: dict[str, Any], fields: Fields) -> None:
    """Apply one holder's share to ``doc``; its register words under ``<holder>.r``."""
    words = {f"{holder_of(fields)}.{REGISTERS}.{w}": m for w, m in fields.words.items()}
    for ops, merge in ((fields.max, max), (words, int.__or__)):
        for path, value in ops.items():
            at, last = _parent(doc, path)
            at[last] = value if last not in at else merge(at[last], value)
    for path, values in fields.add_to_set.items():  # $addToSet with $each: a set union
        at, last = _parent(doc, path)
        at[last] = sorted({*at.get(last, ()), *values})
