"""Stable compact keys for user/item ids (pure).

Python's ``hash()`` is salted per process (PYTHONHASHSEED), so the seed's
``hash((user, dish))`` gives another key in every worker and after every restart.
Keys here come from xxHash (XXH3, a maintained, fast, platform-independent hash):
the same id gives the same key in every process, on every machine, forever.
"""

from __future__ import annotations

import xxhash

Id = int | str

_INT64 = 1 << 64


def id_bytes(x: Id) -> bytes:
    """Canonical bytes of an id: the integer 7 and the string "7" stay different ids."""
    if isinstance(x, bool):
        raise TypeError("ids are integers or strings")
    if isinstance(x, int):
        return b"i" + str(x).encode()
    return b"s" + x.encode()


def to_int64(u: int) -> int:
    """An unsigned 64-bit value as the signed int64 MongoDB stores."""
    return u - _INT64 if u >= 1 << 63 else u


def pair_key(user: Id, item: Id) -> int:
    """Signed 64-bit key of a (user, item) pair: 8 bytes as ``_id`` instead of both ids.

    Collisions: with 10^9 pairs the chance that any two share a key is about 3%;
    the pair documents keep both ids, so an audit can find one.
    """
    return to_int64(xxhash.xxh3_64_intdigest(id_bytes(user) + b"\x00" + id_bytes(item)))


def id_str(x: Id) -> str:
    """An id inside a string ``_id`` (type-tagged, so 7 and "7" differ)."""
    return id_bytes(x).decode()


def id_of_str(text: str) -> Id:
    """The id :func:`id_str` wrote (``"i7"`` is 7, ``"s7"`` is "7")."""
    if text[:1] == "i":
        return int(text[1:])
    if text[:1] == "s":
        return text[1:]
    raise ValueError(f"not a type-tagged id: {text[:40]!r}")


def escape_part(text: str) -> str:
    """``%`` and ``/`` percent-encoded, so that ``/`` separates the parts of an ``_id`` unambiguously."""
    return text.replace("%", "%25").replace("/", "%2F")


def item_slot_id(item: Id, partition: int) -> str:
    """``_id`` of an item's document for one source partition (type-tagged id).

    Events are keyed by user, so every worker writes every item's documents; one
    document per item and source partition has one writer at a time (no WriteConflict),
    and reads sum or union an item's few documents (impressions, relations).
    """
    return f"{id_str(item)}|{partition}"
