"""The stream kinds a worker runs: topic, aggregator factory and pre-flush step of each.

Construction only (no I/O): decoders with the deployment's limits, field names in
its schema mode, filter sizes, and the name store's cache that hits with custom
properties resolve before each flush.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase

from pipeline.aggregate.bloom import BloomSpec
from pipeline.aggregate.hits import HitCounts
from pipeline.aggregate.impressions import ImpressionCounts, impression_fields
from pipeline.aggregate.listens import ListenSketches
from pipeline.aggregate.relations import RelationFilters, relation_sides
from pipeline.ingest.hits import HitDecoder
from pipeline.ingest.impressions import ImpressionDecoder, ListenDecoder, RelationDecoder
from pipeline.names import NameCache, NameStore
from pipeline.names.props import PropKeys, namespace_limit
from pipeline.schemas import check_mode, hits_fields
from pipeline.settings import Settings
from pipeline.worker.batch import Aggregator


@dataclass(frozen=True)
class StreamSpec:
    """One stream kind: its name (metrics, logs), input topic, window factory and pre-flush step."""

    name: str
    topic: str
    factory: Callable[[], Aggregator]
    prepare: Callable[[Any], Awaitable[object]] | None = None


def stream_specs(settings: Settings, db: AsyncDatabase[dict[str, Any]]) -> tuple[list[StreamSpec], NameCache]:
    """Every stream kind of a worker, and the name cache the hits stream resolves through."""
    s = settings
    mode = check_mode(s.schema)
    limit = namespace_limit(s.props_max_names, s.props_max_values)
    names = NameCache(NameStore(db, mode, s.read_chunk), limit, s.name_store_doc_cap)
    prop_keys = PropKeys(names, mode)

    async def resolve_props(agg: HitCounts) -> None:
        if agg.props:
            await prop_keys.resolve(agg.prop_pairs())

    hit_decoder, fields = HitDecoder.for_settings(s), hits_fields(mode)
    imp_decoder, imp_fields = ImpressionDecoder(s.max_event_bytes, s.future_skew), impression_fields(mode)
    rel_decoder = RelationDecoder(s.max_event_bytes)
    sides = relation_sides(s.relation_user_capacity, s.relation_item_capacity, s.relation_fpr, mode)
    listen_decoder = ListenDecoder(s.max_event_bytes, s.future_skew)
    heard = BloomSpec.for_capacity(s.listen_heard_capacity, s.listen_heard_fpr)
    p = s.listen_hll_precision
    specs = [
        StreamSpec("hits", s.hits_topic, lambda: HitCounts(hit_decoder, fields, prop_keys), resolve_props),
        StreamSpec("impressions", s.impressions_topic, lambda: ImpressionCounts(imp_decoder, imp_fields)),
        StreamSpec("relations", s.relations_topic, lambda: RelationFilters(rel_decoder, sides)),
        StreamSpec("listens", s.listens_topic, lambda: ListenSketches(listen_decoder, p, heard, mode)),
    ]
    return specs, names
