"""Access to the files in the top-level ``schemas/`` folder.

The JSON Schemas of events and the stored field names live there, once, so that a
compact schema (short field names) changes data files, not code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"


@cache
def load_json(name: str) -> Any:
    """Parsed content of ``schemas/<name>``."""
    with open(SCHEMA_DIR / name, encoding="utf-8") as f:
        return json.load(f)


def event_schema(kind: str) -> dict[str, Any]:
    """JSON Schema of one event kind (``hit`` ...)."""
    schema: dict[str, Any] = load_json(f"{kind}.schema.json")
    return schema


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
    """Both hits documents' names, as one value to pass around."""

    daily: DailyFields
    monthly: MonthlyFields


@cache
def hits_fields() -> HitsFields:
    """Field names from ``schemas/fields.json``."""
    raw = load_json("fields.json")
    return HitsFields(
        daily=DailyFields(**raw["hits_daily"]),
        monthly=MonthlyFields(**raw["hits_monthly"]),
    )
