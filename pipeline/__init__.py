"""preagg: Kafka → Faust → MongoDB pre-aggregation.

The public API is small: settings, the producer, and the queries. Everything else
is an implementation module that may change.

The names are loaded on first use (PEP 562), not when ``pipeline`` is imported: every
module of the package (``pipeline.core.hll``, the CLI) imports this file first, and
loading the producer, the MongoDB client, the embedded services and the hits kind
here made each of them pay for all of those (aiokafka, pymongo, Faust's deps).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.kafka.producer import EventProducer
    from pipeline.kinds.hits.files import hit_key
    from pipeline.kinds.hits.query import hits_series
    from pipeline.kinds.hits.query_visitors import visitor_rows
    from pipeline.services.embedded import EmbeddedServices
    from pipeline.services.urls import resolve
    from pipeline.settings import Settings
    from pipeline.store.client import mongo_client

#: Public name → the module that defines it.
_WHERE = {
    "EmbeddedServices": "pipeline.services.embedded",
    "EventProducer": "pipeline.kafka.producer",
    "Settings": "pipeline.settings",
    "hit_key": "pipeline.kinds.hits.files",
    "hits_series": "pipeline.kinds.hits.query",
    "mongo_client": "pipeline.store.client",
    "resolve": "pipeline.services.urls",
    "visitor_rows": "pipeline.kinds.hits.query_visitors",
}

__all__ = [
    "EmbeddedServices",
    "EventProducer",
    "Settings",
    "hit_key",
    "hits_series",
    "mongo_client",
    "resolve",
    "visitor_rows",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module the first time it is asked for."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
