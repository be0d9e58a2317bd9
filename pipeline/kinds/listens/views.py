"""The listens view analysts query: a user's tags per day with their distinct songs, in plain words.

A (user, tag) document keeps seven weekday slots, each a day and a sketch; the view
turns them into one row per user, tag and day, with the number of distinct songs the
worker stores beside each sketch (older slots written before it have none: ``null``).
"""

from __future__ import annotations

from pipeline.core.fields import FieldMode, View
from pipeline.kinds.listens.layout import listen_fields
from pipeline.store.view_exprs import DAY, ID, compact_day_text, path


def views(mode: FieldMode) -> list[View]:
    """``listens_tag_days`` in field-name ``mode``."""
    f = listen_fields(mode)
    return [
        View(
            "listens_tag_days",
            f["collection"],
            (
                {
                    "$project": {
                        "_id": 0,
                        "u": path(f["user"]),
                        "t": path(f["tag"]),
                        "s": {"$objectToArray": path(f["slots"])},
                    }
                },
                {"$unwind": "$s"},
                {
                    "$project": {
                        "user": "$u",
                        "tag": "$t",
                        "date": compact_day_text(f"$s.v.{f['date']}"),
                        "songs": {"$ifNull": [f"$s.v.{f['songs']}", None]},
                    }
                },
            ),
            "one row per user, tag and UTC day of the last seven (one per weekday: a newer week replaces it)",
            (
                ("user", ID, "the user"),
                ("tag", ID, "the tag"),
                ("date", DAY, "the UTC day, YYYY-MM-DD"),
                (
                    "songs",
                    {"bsonType": ["int", "long", "null"], "minimum": 0},
                    "distinct songs the user listened to with that tag that day (exact below 128, "
                    "else a HyperLogLog estimate); null for days written before the number was stored",
                ),
            ),
        )
    ]
