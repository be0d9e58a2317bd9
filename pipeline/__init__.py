"""preagg: Kafka → Faust → MongoDB pre-aggregation.

The public API is small: settings, the producer, and the queries. Everything else
is an implementation module that may change.
"""

from pipeline.kinds.hits.files import hit_key
from pipeline.kinds.hits.query import hits_series
from pipeline.producer import EventProducer
from pipeline.services.embedded import EmbeddedServices, resolve
from pipeline.settings import Settings
from pipeline.store.client import mongo_client

__all__ = [
    "EmbeddedServices",
    "EventProducer",
    "Settings",
    "hit_key",
    "hits_series",
    "mongo_client",
    "resolve",
]
