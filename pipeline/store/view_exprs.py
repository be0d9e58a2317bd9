"""Aggregation expressions the readable views share: zero-filled series, unescaped keys, dates as text.

Each function returns a MongoDB expression (plain dicts) built from stored field paths,
so that one view declaration serves both field-name modes. They use operators of
MongoDB 5.2 and earlier (``$dateDiff``, ``$dateAdd``, ``$sortArray``; ``$getField`` with a
constant name only): every server we support (6.0 to 8.0) and the embedded store run them. Time zones are
never an expression argument here (the embedded store takes only constants there):
what depends on a zone is stored in the document by the workers.
"""

from __future__ import annotations

from typing import Any

Expr = Any

#: Column types of the views' rows (``$jsonSchema`` fragments: pipeline.core.doc_schema).
INT: dict[str, Any] = {"bsonType": ["int", "long"], "minimum": 0}
TEXT: dict[str, Any] = {"bsonType": "string"}
DAY: dict[str, Any] = {"bsonType": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
MONTH: dict[str, Any] = {"bsonType": "string", "pattern": "^[0-9]{4}-[0-9]{2}$"}
BOOL: dict[str, Any] = {"bsonType": "bool"}
#: A user's, item's or tag's id as its events sent it.
ID: dict[str, Any] = {"bsonType": ["int", "long", "string"]}


def path(*parts: str) -> str:
    """``$a.b``: the value at a dotted stored path."""
    return "$" + ".".join(parts)


def field_of(doc: Expr, name: Expr) -> Expr:
    """The value of ``doc``'s field named by the expression ``name``, or ``null``.

    ``$getField`` takes an expression for its name only from MongoDB 7.2 on (SERVER-74371;
    6.0 and 7.0 want a constant), so this walks the fields instead: a document of tens of
    fields (hours, days, tokens) costs tens of comparisons.
    """
    return {
        "$reduce": {
            "input": {"$objectToArray": {"$ifNull": [doc, {}]}},
            "initialValue": None,
            "in": {"$cond": [{"$eq": ["$$this.k", name]}, "$$this.v", "$$value"]},
        }
    }


def zero_filled(counters: str, first: int, count: Expr, most: int) -> Expr:
    """An array of ``count`` numbers: ``counters.<first>``, ``counters.<first+1>``…, 0 where absent.

    ``counters`` is a stored sub-document keyed by the decimal position (hours, days), at
    most ``most`` of them. The stored counters are merged over a constant of zeros in
    position order (``$mergeObjects`` keeps the first document's field order), then cut to
    ``count``: a handful of native operations a document, where looking each position up
    (``field_of``) cost the embedded store six times as much (docs/benchmarks.md).
    """
    zeros = {str(i): 0 for i in range(first, first + most)}
    merged = {"$objectToArray": {"$mergeObjects": [{"$literal": zeros}, {"$ifNull": [counters, {}]}]}}
    return {"$slice": [{"$map": {"input": merged, "as": "e", "in": "$$e.v"}}, count]}


def day_text(date_path: str) -> Expr:
    """``YYYY-MM-DD`` of a stored local date (its midnight, as the workers store it)."""
    return {"$dateToString": {"date": date_path, "format": "%Y-%m-%d"}}


def month_text(date_path: str) -> Expr:
    """``YYYY-MM`` of a stored month (its first day's midnight)."""
    return {"$dateToString": {"date": date_path, "format": "%Y-%m"}}


def days_in_month(date_path: str) -> Expr:
    """How many days the month starting at ``date_path`` has."""
    return {
        "$dateDiff": {
            "startDate": date_path,
            "endDate": {"$dateAdd": {"startDate": date_path, "unit": "month", "amount": 1}},
            "unit": "day",
        }
    }


def unescaped(key: Expr) -> Expr:
    """A readable-mode field name back to its text: the inverse of ``escape_key`` (``%`` last).

    ``%`` alone is the empty name.
    """
    out = key
    for code, char in (("%2E", "."), ("%24", "$"), ("%00", "\0"), ("%25", "%")):
        # a literal: "$" alone would be read as a field path
        out = {"$replaceAll": {"input": out, "find": code, "replacement": {"$literal": char}}}
    return {"$cond": [{"$eq": [key, "%"]}, "", out]}


def number(value: Expr) -> Expr:
    """``value``, or 0 where the document has none."""
    return {"$ifNull": [value, 0]}


def compact_day_text(day: Expr) -> Expr:
    """``YYYY-MM-DD`` of a stored ``YYYYMMDD`` string."""
    return {
        "$concat": [
            {"$substrCP": [day, 0, 4]},
            "-",
            {"$substrCP": [day, 4, 2]},
            "-",
            {"$substrCP": [day, 6, 2]},
        ]
    }
