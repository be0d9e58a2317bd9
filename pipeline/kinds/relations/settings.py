"""Settings of the relations stream (``PREAGG_RELATIONS_*``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.settings import StreamKey, StreamSettings


@dataclass(frozen=True)
class RelationsSettings(StreamSettings):
    """Topic and Bloom filter sizes of user–item relations."""

    #: Topic of user–item relations (likes, ratings of 4 or more).
    topic: str = "relations"
    #: Target false-positive rate of the relation Bloom filters. Lower: bigger filters.
    fpr: float = 0.005
    #: Items a user's filter is sized for (its false-positive rate passes ``fpr``
    #: once the user has more relations). Size it near the 99th percentile.
    user_capacity: int = 300
    #: Users an item's filter is sized for.
    item_capacity: int = 300


#: The kind's name and settings type (``settings.of(KEY)``), for its modules the kind imports.
KEY = StreamKey("relations", RelationsSettings)
