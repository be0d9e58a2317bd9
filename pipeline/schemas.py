"""Access to the files in the top-level ``schemas/`` folder.

The JSON Schemas of events and the stored field names live there, once. Every
collection has readable (logical) field names, used by the code, the query API and
the docs, and short ``compact`` ones; a deployment stores one or the other
(``PREAGG_SCHEMA``), and only this module turns one into the other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"

SchemaMode = Literal["compact", "readable"]
SCHEMA_MODES: tuple[SchemaMode, ...] = ("compact", "readable")


@cache
def load_json(name: str) -> Any:
    """Parsed content of ``schemas/<name>``."""
    with open(SCHEMA_DIR / name, encoding="utf-8") as f:
        return json.load(f)


def event_schema(kind: str) -> dict[str, Any]:
    """JSON Schema of one event kind (``hit`` ...)."""
    schema: dict[str, Any] = load_json(f"{kind}.schema.json")
    return schema


def collection_kinds() -> list[str]:
    """The document kinds ``schemas/fields.json`` defines, in file order."""
    return [k for k in load_json("fields.json") if not k.startswith("_")]


def check_mode(mode: str) -> SchemaMode:
    """``mode`` if it is a schema mode, else ``ValueError`` naming the choices."""
    if mode not in SCHEMA_MODES:
        raise ValueError(f"schema mode {mode!r}: expected one of {', '.join(SCHEMA_MODES)}")
    return mode


@cache
def field_names(kind: str, mode: str = "compact") -> dict[str, str]:
    """Readable name → stored name for one document kind, plus ``collection``.

    The result is cached and shared: callers must not modify it.
    """
    spec = load_json("fields.json")[kind]
    check_mode(mode)
    out = {"collection": spec["collection"]}
    for readable, about in spec["fields"].items():
        out[readable] = about["compact"] if mode == "compact" else readable
    return out


def schema_table(mode: str) -> list[dict[str, str]]:
    """Every stored field: collection, readable and stored name, meaning (``preagg schema``)."""
    rows = []
    for kind in collection_kinds():
        spec = load_json("fields.json")[kind]
        stored = field_names(kind, mode)
        for readable, about in spec["fields"].items():
            rows.append(
                {
                    "collection": spec["collection"],
                    "readable": readable,
                    "stored": stored[readable],
                    "meaning": about["about"],
                }
            )
    return rows


@dataclass(frozen=True)
class DailyFields:
    """Stored names of the daily hits document."""

    collection: str
    metadata: str
    date: str
    site: str
    page: str
    total: str
    hourly: str
    minute: str
    props: str


@dataclass(frozen=True)
class MonthlyFields:
    """Stored names of the monthly hits document."""

    collection: str
    metadata: str
    date: str
    site: str
    page: str
    total: str
    daily: str


@dataclass(frozen=True)
class HitsFields:
    """Both hits documents' names, and the mode they come from, as one value to pass around."""

    daily: DailyFields
    monthly: MonthlyFields
    mode: SchemaMode = "compact"


@cache
def hits_fields(mode: str = "compact") -> HitsFields:
    """Field names of the hits documents in ``mode``."""
    return HitsFields(
        daily=DailyFields(**field_names("hits_daily", mode)),
        monthly=MonthlyFields(**field_names("hits_monthly", mode)),
        mode=check_mode(mode),
    )
