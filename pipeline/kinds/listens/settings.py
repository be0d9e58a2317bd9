"""Settings of the listens stream (``PREAGG_LISTENS_*``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.settings import StreamKey, StreamSettings


@dataclass(frozen=True)
class ListensSettings(StreamSettings):
    """Topic, sketch precision and "heard" filter size of listens."""

    #: Topic of listens (user heard song, tagged tag).
    topic: str = "listens"
    #: HyperLogLog precision of listen sketches: 2^p registers, standard error
    #: 1.04 / sqrt(2^p) (p = 12: 1.6%, 3 KB dense). Higher: more accurate, bigger.
    hll_precision: int = 12
    #: Songs a (user, tag) "heard" filter is sized for, and its false-positive rate.
    heard_capacity: int = 1000
    heard_fpr: float = 0.01


#: The kind's name and settings type (``settings.of(KEY)``), for its modules the kind imports.
KEY = StreamKey("listens", ListensSettings)
