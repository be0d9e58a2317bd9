"""preagg: Kafka → Faust → MongoDB pre-aggregation.

The public API is small: settings, the producer, and the queries. Everything else
is an implementation module that may change.
"""

from pipeline.producer import EventProducer
from pipeline.query.hits import hits_series
from pipeline.services.embedded import EmbeddedServices, resolve
from pipeline.settings import Settings
from pipeline.sinks.mongo import mongo_client

__all__ = ["EmbeddedServices", "EventProducer", "Settings", "hits_series", "mongo_client", "resolve"]
