"""Settings of the impressions stream (``PREAGG_IMPRESSIONS_*``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.settings import StreamKey, StreamSettings


@dataclass(frozen=True)
class ImpressionsSettings(StreamSettings):
    """Impressions have only their topic."""

    #: Topic of impressions (user was shown item).
    topic: str = "impressions"


#: The kind's name and settings type (``settings.of(KEY)``), for its modules the kind imports.
KEY = StreamKey("impressions", ImpressionsSettings)
