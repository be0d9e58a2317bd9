"""Settings of the impressions stream (``PREAGG_IMPRESSIONS_*``)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.settings import StreamSettings


@dataclass(frozen=True)
class ImpressionsSettings(StreamSettings):
    """Impressions have only their topic."""

    #: Topic of impressions (user was shown item).
    topic: str = "impressions"
