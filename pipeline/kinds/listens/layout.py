"""The listens documents: one per (user, tag) and one summary per user; field names, ``_id`` and index."""

from __future__ import annotations

from pipeline.core.fields import SCHEMAS, FieldMode, Index, field_names
from pipeline.core.ids import Id, id_str

#: ``schemas/listens``: the event JSON Schema and this document's field names.
FOLDER = SCHEMAS / "listens"


def listen_fields(mode: FieldMode = "compact") -> dict[str, str]:
    """Stored names of the listens document (schemas/listens/fields.json) in schema ``mode``."""
    return field_names(FOLDER, "listens", mode)


def top_fields(mode: FieldMode = "compact") -> dict[str, str]:
    """Stored names of the per-user top-tags summary (:mod:`pipeline.kinds.listens.tops`)."""
    return field_names(FOLDER, "tops", mode)


def top_id(user: Id) -> str:
    """``_id`` of a user's summary (type-tagged id)."""
    return id_str(user)


def listen_id(user: Id, tag: Id) -> str:
    """``_id`` of a (user, tag) document (type-tagged ids)."""
    return f"{id_str(user)}|{id_str(tag)}"


def indexes(mode: FieldMode) -> list[Index]:
    """A user's (user, tag) documents in one indexed read (top tags)."""
    f = listen_fields(mode)
    return [Index(f["collection"], ((f["user"], 1),), "user")]
