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

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from bson import Int64

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


def created_by_upserts(
    statements: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]],
) -> dict[str, Any] | None:
    """The document the upserts ``statements`` (filter, update) of one absent ``_id`` leave
    together, in whichever order the server applies them (an unordered bulk write), or ``None``
    when that order would matter or this cannot say.

    The first inserts; the others then update the document: counters add, ``$bit or`` masks
    OR, ``$max`` keeps the largest, ``$addToSet`` adds the values it lacks, and each ``$set``
    path is set by one statement only (the marks: a mark key per partition and part). Every
    statement carries the same ``$setOnInsert`` (the document's metadata), or the first to
    arrive would decide it.

    A split document's parts, and the partitions' updates a merge left apart, are so sent as
    one insert of a new document: on the embedded store each upsert of a wide new document cost
    about 1.1 ms; on keyless log lines with visitors 2,102 of them took 2.6 s of the store's
    9.7 s, and with the documents inserted whole the store's CPU for the run was 6.3 s.
    """
    if len(statements) == 1:
        return created_by_upsert(*statements[0])
    on_insert = statements[0][1].get("$setOnInsert", {})
    whole: dict[str, dict[str, Any]] = {}
    for _, update in statements:
        if update.get("$setOnInsert", {}) != on_insert:
            return None
        for op, fields in update.items():
            if op == "$setOnInsert":
                continue
            into = whole.setdefault(op, {})
            for path, value in fields.items():
                if path not in into:
                    into[path] = value
                    continue
                added = _added(op, into[path], value)
                if added is None:
                    return None
                into[path] = added
    if on_insert:
        whole["$setOnInsert"] = dict(on_insert)
    return created_by_upsert(statements[0][0], whole)


def _added(op: str, had: Any, value: Any) -> Any:
    """Two statements' operands of one path under ``op``, as the second applied after the first
    leaves it (and the first after the second); ``None``: not modelled, or order-dependent."""
    if op == "$inc" and _number(had) and _number(value):
        total = had + value
        return Int64(total) if isinstance(had, Int64) or isinstance(value, Int64) else total
    if op == "$bit" and set(had) == set(value) == {"or"} and _number(had["or"]) and _number(value["or"]):
        return {"or": Int64(had["or"] | value["or"])}
    if op == "$max" and type(had) is type(value) and isinstance(had, int | float | datetime):
        return max(had, value)  # numbers, booleans and dates order alike in BSON and Python
    if op == "$addToSet":
        first, second = _set_of(had), _set_of(value)
        if first is None or second is None:
            return None
        return {"$each": first + [v for v in second if v not in first]}
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
