"""JSON Schemas of the stored documents and of the views' rows, built from their declarations (pure).

Each field of ``schemas/<kind>/fields.json`` carries its BSON type (``bson``) and, when it
lives inside another field, where (``in``: ``metadata``, or ``slots.*`` for each value of
``slots``). From them, one document's schema in either field-name mode: every property
described by its readable name and meaning, nothing else allowed (a field the workers
write and the declarations miss fails the tests that validate stored documents).

The dialect is MongoDB's ``$jsonSchema`` (draft 4 with ``bsonType``), so that a schema
works where analysts use one: a ``$jsonSchema`` query, Compass's validation tab, a
collection validator. ``make docs-schemas`` writes them to ``schemas/*/documents/`` (the
default compact names) and ``schemas/views/``; ``preagg schema --json-schema NAME``
prints one for the deployment's mode.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pipeline.core.fields import FieldMode, View, documents, field_names
from pipeline.core.marks import MARKS

#: The idempotency marks every upserted document carries (docs/exactly-once.md).
MARKS_SCHEMA: dict[str, Any] = {
    "bsonType": "object",
    "description": "idempotency marks: per source partition (and part), the sequence and range of the "
    "last flush applied here (docs/exactly-once.md); bookkeeping, never counts",
    "additionalProperties": {"bsonType": ["int", "long"]},
}


def document_schema(folder: Path, doc: str, mode: FieldMode) -> dict[str, Any]:
    """The ``$jsonSchema`` of one stored document kind of ``folder`` in ``mode``."""
    spec = documents(folder)[doc]
    names = field_names(folder, doc, mode)
    top: dict[str, Any] = {
        "_id": {**spec.get("id", {}).get("bson", {}), "description": "_id"},
        MARKS: MARKS_SCHEMA,
    }
    nested: dict[str, dict[str, Any]] = {}
    for readable, field in spec["fields"].items():
        prop = {**copy.deepcopy(field["bson"]), "description": f"{readable}: {field['about']}"}
        parent = field.get("in")
        if parent is None:
            top[names[readable]] = prop
        else:
            nested.setdefault(parent, {})[names[readable]] = prop
    for parent, props in nested.items():
        name, _, each = parent.partition(".")
        holder = top[names[name]]
        if each == "*":  # the fields of each value of a keyed sub-document
            holder = next(iter(holder["patternProperties"].values()))
        holder.setdefault("properties", {}).update(props)
        holder["additionalProperties"] = False
    return {
        "bsonType": "object",
        "title": spec["collection"] if mode == "compact" else f"{spec['collection']} ({mode} names)",
        "description": spec["about"],
        "required": ["_id"],
        "properties": top,
        "additionalProperties": False,
    }


def view_schema(view: View) -> dict[str, Any]:
    """The ``$jsonSchema`` of one view's rows."""
    return {
        "bsonType": "object",
        "title": view.name,
        "description": f"{view.about} (a read-only view of {view.source})",
        "required": [name for name, _, _ in view.fields],
        "properties": {name: {**bson, "description": about} for name, bson, about in view.fields},
        "additionalProperties": False,
    }


def schema_files(folders: Iterable[Path], views: Iterable[View]) -> dict[Path, dict[str, Any]]:
    """Every schema file ``make docs-schemas`` writes, by path: documents in compact names."""
    folders = list(folders)
    out: dict[Path, dict[str, Any]] = {}
    for folder in folders:
        for doc, spec in documents(folder).items():
            out[folder / "documents" / f"{spec['collection']}.schema.json"] = document_schema(
                folder, doc, "compact"
            )
    for view in views:
        out[folder_of_views(folders) / f"{view.name}.schema.json"] = view_schema(view)
    return out


def folder_of_views(folders: list[Path]) -> Path:
    """``schemas/views``: beside the kinds' folders."""
    return folders[0].parent / "views"
