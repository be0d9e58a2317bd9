"""Prometheus figures of a worker's name store."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from pipeline.store.names.cache import NameCache


def name_store_metrics(names: NameCache) -> Iterator[Metric]:
    """Round trips of the name store (none in a steady stream) and names counted as ``other``."""
    reads = CounterMetricFamily("preagg_name_store_reads", "Bulk reads of the name store")
    reads.add_metric([], names.store.reads)
    writes = CounterMetricFamily("preagg_name_store_writes", "Appends and document creations")
    writes.add_metric([], names.store.writes)
    other = CounterMetricFamily(
        "preagg_name_overflow",
        "Names past their namespace's limit, counted as 'other' (once per flush they appear in)",
    )
    other.add_metric([], names.overflow_names)
    yield from (reads, writes, other)
