"""Settings of the listens stream (``PREAGG_LISTENS_*``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.kinds.listens.heard import HeardSpec
from pipeline.settings import StreamKey, StreamSettings


@dataclass(frozen=True)
class ListensSettings(StreamSettings):
    """Topic, sketch precision and "heard" filter size of listens."""

    #: Topic of listens (user heard song, tagged tag).
    topic: str = "listens"
    #: HyperLogLog precision of listen sketches: 2^p registers, standard error
    #: 1.04 / sqrt(2^p) (p = 12: 1.6%, 3 KB dense). Higher: more accurate, bigger.
    hll_precision: int = 12
    #: "Heard" answers: exact while a (user, tag) has at most 128 songs (its sketch's
    #: hashes), then Bloom filters: the first for ``heard_capacity`` songs, each next
    #: twice as big, all together at most ``heard_fpr`` false positives. Bigger
    #: capacity: fewer filters, more bytes for small sets; lower rate: more bytes.
    heard_capacity: int = 256
    heard_fpr: float = 0.01

    def heard(self) -> HeardSpec:
        """The filters' sizes."""
        return HeardSpec(self.heard_capacity, self.heard_fpr)


#: The kind's name and settings type (``settings.of(KEY)``), for its modules the kind imports.
KEY = StreamKey("listens", ListensSettings)
