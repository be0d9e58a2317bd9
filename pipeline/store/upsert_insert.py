"""The document an upsert inserts when nothing matches: sent as a plain insert instead (pure).

On a first touch (a backfill, a new day) nearly every document of a flush is new, and an
insert costs the embedded store a quarter of an upsert that inserts (135-155 against 577-630
µs a document: ``python -m benchmarks.store_updates --first-touch``, docs/benchmarks.md "The
store's cost per document"); on MongoDB it skips the
upsert's query phase. An upsert that matches nothing inserts a document made of the filter's
equality conditions with the update's operators applied to it (MongoDB manual,
*db.collection.updateOne()*, "Upsert" behavior). :func:`created_by_upsert` builds that document
for the operators a flush uses; anything else, or two operators on one path, answers ``None``
(sent as the upsert). ``tests/integration/test_first_inserts.py`` checks it against the store.

An insert that meets an existing document fails with a duplicate key (E11000), which the
sink already resolves by reading the document's marks (``IdempotentCommit._unapplied``): applied, or
sent again as the upsert. So a wrong guess costs a round trip, never a count.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.core.updates import put_path

#: Operators whose effect on a missing field is to set it (``$bit``: on 0, SERVER-3046).
_SETTERS = ("$setOnInsert", "$set", "$inc", "$max", "$min")


def created_by_upsert(flt: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any] | None:
    """The document ``update_one(flt, update, upsert=True)`` inserts when no document matches,
    or ``None`` when this cannot say (an operator it does not model, a path set twice)."""
    doc: dict[str, Any] = {}
    try:
        for path, value in flt.items():
            if path.startswith("$") or (isinstance(value, Mapping) and any(k.startswith("$") for k in value)):
                continue  # not an equality (the marks' $not): nothing of it is inserted
            if put_path(doc, path, value):
                return None
        for op, fields in update.items():
            if op in _SETTERS:
                items = list(fields.items())
            elif op == "$bit":
                items = [(p, _bit(v)) for p, v in fields.items()]
            elif op == "$addToSet":
                items = [(p, _set_of(v)) for p, v in fields.items()]
            else:
                return None
            for path, value in items:
                if value is None or put_path(doc, path, value):
                    return None
    except ValueError:  # a parent that is not a document: let the server say what it does
        return None
    return doc


def _bit(spec: Mapping[str, Any]) -> Any:
    """``$bit`` on a missing field: ``or`` and ``xor`` with 0 give the operand, ``and`` gives 0."""
    if set(spec) == {"or"} or set(spec) == {"xor"}:
        return next(iter(spec.values()))
    return None


def _set_of(value: Any) -> list[Any] | None:
    """``$addToSet`` on a missing field: the values, each once, in order."""
    values = value["$each"] if isinstance(value, Mapping) and "$each" in value else [value]
    if isinstance(value, Mapping) and len(value) != 1:
        return None  # $each with modifiers this does not model
    out: list[Any] = []
    for v in values:
        if v not in out:
            out.append(v)
    return out
