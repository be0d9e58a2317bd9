"""Stored field names, read from the files of the top-level ``schemas/`` folder.

``schemas/<kind>/`` holds what one stream kind's data looks like, language-neutral
so producers and readers in any language can use it: ``event.schema.json`` (the
JSON Schema of its events) and ``fields.json`` (its collections' field names);
``schemas/store/`` the collections every kind shares. Every collection has readable
(logical) field names, used by the code, the query API and the docs, and short
``compact`` ones; a deployment stores one or the other (``PREAGG_SCHEMA``, the
"field-name mode"), and only this module turns one into the other.

The wheel ships the folder as ``pipeline/_schemas``; a source checkout reads it in place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

_PACKAGE = Path(__file__).resolve().parent.parent
#: The schemas folder: inside the installed package, else the source checkout's top level.
SCHEMAS = _PACKAGE / "_schemas" if (_PACKAGE / "_schemas").is_dir() else _PACKAGE.parent / "schemas"
#: Folder of the collections shared by every kind (the name store).
STORE_SCHEMAS = SCHEMAS / "store"

FieldMode = Literal["compact", "readable"]
FIELD_MODES: tuple[FieldMode, ...] = ("compact", "readable")


@cache
def load_json(path: Path) -> Any:
    """Parsed content of one schema file."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def event_schema(folder: Path) -> dict[str, Any]:
    """The JSON Schema of one kind's events (``<folder>/event.schema.json``)."""
    schema: dict[str, Any] = load_json(folder / "event.schema.json")
    return schema


def documents(folder: Path) -> dict[str, Any]:
    """The document kinds ``<folder>/fields.json`` defines, in file order, with their specs."""
    return {k: v for k, v in load_json(folder / "fields.json").items() if not k.startswith("_")}


def check_mode(mode: str) -> FieldMode:
    """``mode`` if it is a field-name mode, else ``ValueError`` naming the choices."""
    if mode in FIELD_MODES:
        return mode
    raise ValueError(f"field-name mode {mode!r}: expected one of {', '.join(FIELD_MODES)}")


@cache
def field_names(folder: Path, doc: str, mode: FieldMode = "compact") -> dict[str, str]:
    """Readable name → stored name for one document kind of ``folder``, plus ``collection``.

    The result is cached and shared: callers must not modify it.
    """
    spec = documents(folder)[doc]
    check_mode(mode)
    out = {"collection": spec["collection"]}
    for readable, about in spec["fields"].items():
        out[readable] = about["compact"] if mode == "compact" else readable
    return out


def schema_table(folders: list[Path], mode: FieldMode) -> list[dict[str, str]]:
    """Every stored field of the given folders: collection, readable and stored name, meaning."""
    rows = []
    for folder in folders:
        for doc, spec in documents(folder).items():
            stored = field_names(folder, doc, mode)
            for readable, about in spec["fields"].items():
                where = about.get("in")  # inside another field: its full stored path
                parent, _, each = (where or "").partition(".")
                prefix = f"{stored[parent]}.{'<key>.' if each else ''}" if where else ""
                rows.append(
                    {
                        "collection": spec["collection"],
                        "readable": readable,
                        "stored": prefix + stored[readable],
                        "meaning": about["about"],
                    }
                )
    return rows


@dataclass(frozen=True)
class ShardKey:
    """The shard key of one collection on a sharded cluster (``preagg setup`` shards it).

    Every upsert's filter must carry all its fields as equalities (MongoDB 6.0 refuses
    an upsert without the full shard key); the conformance tests check each kind's.
    """

    collection: str
    #: (dotted field, 1 or "hashed"), in key order.
    keys: tuple[tuple[str, int | str], ...]


def hashed_id(collection: str) -> ShardKey:
    """Hashed ``_id``: writes spread evenly, every upsert by ``_id`` routed to one shard."""
    return ShardKey(collection, (("_id", "hashed"),))


@dataclass(frozen=True)
class Index:
    """One secondary index a kind's collection needs, declared as data (the store creates it)."""

    collection: str
    #: (dotted field, 1 ascending or -1 descending), in index order.
    keys: tuple[tuple[str, int], ...]
    name: str


@dataclass(frozen=True)
class View:
    """One read-only MongoDB view an analyst queries instead of the stored documents.

    Declared as data from the same field names as the documents it reads, so that it
    follows ``PREAGG_SCHEMA``; ``preagg setup`` creates it (or replaces an older one).
    """

    name: str
    #: The collection it reads.
    source: str
    #: Its aggregation pipeline (stages as MongoDB takes them).
    pipeline: tuple[dict[str, Any], ...]
    #: One line for ``preagg schema`` and the docs: what a row is.
    about: str
    #: (field, its BSON type as a ``$jsonSchema`` fragment, what it means), in row order.
    fields: tuple[tuple[str, dict[str, Any], str], ...] = ()
