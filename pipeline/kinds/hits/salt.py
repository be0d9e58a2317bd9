"""The visitors' secret: created once in the store, read by every worker, never logged.

Every worker of a deployment must hash a visitor alike (the sketches of two workers are
unioned), and a flush written again must hash as it did first (docs/exactly-once.md), so
the secret is one document, ``hits_secrets`` ``_id: "visitor"`` (32 random bytes), made by
the first worker that needs it: an insert, and on a duplicate key (another worker inserted
first, E11000) a read of that worker's. The daily keys are derived from it
(:func:`pipeline.kinds.hits.visitors.day_key`). Deleting the document makes every later
hash unlinkable to the earlier ones (and a day written across the change counts its
visitors twice): an operator's decision, never a worker's.
"""

from __future__ import annotations

import contextlib
import os
from datetime import date
from typing import Any

from bson import Binary
from pymongo import ReadPreference, WriteConcern
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError
from pymongo.read_concern import ReadConcern

from pipeline.kinds.hits.layout import SECRETS_COLLECTION
from pipeline.kinds.hits.visitors import day_key

SECRET_ID = "visitor"
SECRET_BYTES = 32


class VisitorKeys:
    """The deployment's visitor secret (read or created once) and the keys derived from it."""

    def __init__(self, db: AsyncDatabase[dict[str, Any]], daily: bool = True) -> None:
        self.db = db
        self.daily = daily
        self._secret: bytes | None = None
        self._keys: dict[date | None, bytes] = {}

    @property
    def ready(self) -> bool:
        """Whether the secret is loaded (:meth:`load`)."""
        return self._secret is not None

    async def load(self) -> None:
        """Read the secret, or create it when no worker has yet (idempotent, race-safe)."""
        if self._secret is not None:
            return
        # Primary, majority: a secret acknowledged by one member and rolled back in a failover
        # would leave this worker hashing with a key no other worker has.
        secrets = self.db.get_collection(
            SECRETS_COLLECTION,
            read_preference=ReadPreference.PRIMARY,
            write_concern=WriteConcern("majority"),
            read_concern=ReadConcern("majority"),
        )
        found = await secrets.find_one({"_id": SECRET_ID})
        if found is None:
            with contextlib.suppress(DuplicateKeyError):  # another worker inserted it first: use that one
                await secrets.insert_one({"_id": SECRET_ID, "secret": Binary(os.urandom(SECRET_BYTES))})
            found = await secrets.find_one({"_id": SECRET_ID})
        if found is None or not isinstance(found.get("secret"), bytes):
            raise RuntimeError(f"{SECRETS_COLLECTION} {SECRET_ID!r} holds no secret")
        self._secret = bytes(found["secret"])

    def key(self, day: date) -> bytes:
        """The key hits of UTC ``day`` are hashed with (one key for all days when ``fixed``)."""
        if self._secret is None:
            raise RuntimeError("the visitor secret is not loaded")
        which = day if self.daily else None
        k = self._keys.get(which)
        if k is None:
            if len(self._keys) > 1000:
                self._keys.clear()
            k = self._keys[which] = day_key(self._secret, which)
        return k
