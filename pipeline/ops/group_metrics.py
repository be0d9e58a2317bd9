"""The consumer group's position as Prometheus series, read from outside its consumers.

A worker reports the lag of the partitions it holds, so a group whose workers are all
gone (crash-looping, scaled to zero, never scheduled) reports nothing, and a partition
no live worker holds is in no worker's series. ``preagg serve`` looks at every stream
topic from outside the group (where each partition ends in Kafka, where the ledgers and
the committed offsets say the group is) and exports that: an alert can then compare
what waits with who holds it (deploy/kubernetes/monitoring.yaml).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from pipeline.ops.pending import STALLED_AFTER, PendingWatch, Sample, pending

#: Every series this module exports, with its labels (the alert rules are checked against it).
SERIES: dict[str, tuple[str, ...]] = {
    "preagg_group_waiting_messages": ("topic", "partition"),
    "preagg_group_stalled": ("topic",),
    "preagg_group_seconds_since_flush": ("topic",),
    "preagg_group_look_age_seconds": ("topic",),
    "preagg_group_looks_failed": (),
}


def group_families(looks: Mapping[str, Sample], failures: int, now: float) -> Iterator[Metric]:
    """The series of the latest look at each topic (a topic never looked at has none)."""
    waiting = GaugeMetricFamily(
        "preagg_group_waiting_messages",
        "Messages in Kafka past the group's counted position, per partition (0 included)",
        labels=["topic", "partition"],
    )
    stalled = GaugeMetricFamily(
        "preagg_group_stalled",
        f"1 while messages wait and the group has not flushed for {STALLED_AFTER:.0f} s",
        labels=["topic"],
    )
    since = GaugeMetricFamily(
        "preagg_group_seconds_since_flush",
        "Seconds since the group's last flush of the topic (absent: never flushed)",
        labels=["topic"],
    )
    age = GaugeMetricFamily(
        "preagg_group_look_age_seconds", "Seconds since the topic was last looked at", labels=["topic"]
    )
    for topic, look in sorted(looks.items()):
        for partition, end in sorted(look.ends.items()):
            waiting.add_metric([topic, str(partition)], max(0, end - look.positions.get(partition, 0)))
        said = pending(topic, look)  # the same verdict the API's `pending` gives
        stalled.add_metric([topic], 1 if said.stalled else 0)
        if said.last_flush_age is not None:
            since.add_metric([topic], round(said.last_flush_age, 3))
        age.add_metric([topic], round(max(0.0, now - look.at), 3))
    failed = CounterMetricFamily(
        "preagg_group_looks_failed", "Looks at the group's position that failed (broker or store away)"
    )
    failed.add_metric([], failures)
    yield from (waiting, stalled, since, age, failed)


class _Families(Collector):
    def __init__(self, looks: Mapping[str, Sample], failures: int, now: float) -> None:
        self.args = (looks, failures, now)

    def collect(self) -> Iterator[Metric]:
        return group_families(*self.args)


def exposition(looks: Mapping[str, Sample], failures: int, now: float) -> bytes:
    """The Prometheus text format of :func:`group_families`."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(looks, failures, now))
    out: bytes = generate_latest(registry)
    return out


class GroupWatch(PendingWatch):
    """``preagg serve``'s watch of what waits, exported as Prometheus series too (``/metrics``)."""

    def exposition(self) -> bytes:
        """The latest looks in Prometheus' text format."""
        return exposition(self.looks(), self.failures, time.time())
