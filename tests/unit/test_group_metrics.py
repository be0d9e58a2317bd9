"""``preagg serve``'s ``/metrics``: the group's position as Prometheus series, from outside its consumers."""

from prometheus_client.parser import text_string_to_metric_families

from pipeline.ops.group_metrics import SERIES, exposition
from pipeline.ops.pending import STALLED_AFTER, Sample


def families(looks: dict[str, Sample], now: float) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = exposition(looks, 2, now).decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples if not s.name.endswith("_created")]
        for f in text_string_to_metric_families(text)
    }


def test_every_partition_is_reported_with_what_waits_on_it() -> None:
    now = 1_000_000.0
    look = Sample(now - 1, {0: 10, 1: 5, 2: 0}, {0: 4, 1: 5}, last_flush=now - 3)
    got = families({"hits": look}, now)
    assert got["preagg_group_waiting_messages"] == [
        ({"topic": "hits", "partition": "0"}, 6.0),
        ({"topic": "hits", "partition": "1"}, 0.0),
        ({"topic": "hits", "partition": "2"}, 0.0),
    ]
    assert got["preagg_group_stalled"] == [({"topic": "hits"}, 0.0)]  # flushed 2 s before the look
    assert got["preagg_group_seconds_since_flush"] == [({"topic": "hits"}, 2.0)]
    assert got["preagg_group_look_age_seconds"] == [({"topic": "hits"}, 1.0)]
    assert got["preagg_group_looks_failed"] == [({}, 2.0)]
    assert {f"{n}" for n in SERIES} == set(got)


def test_a_group_with_no_live_worker_is_stalled_once_messages_wait_a_minute() -> None:
    now = 1_000_000.0
    never = Sample(now, {0: 3}, {}, last_flush=0.0)  # no worker ever flushed
    gone = Sample(now, {0: 9}, {0: 2}, last_flush=now - STALLED_AFTER - 1)  # workers gone a minute
    quiet = Sample(now, {0: 9}, {0: 9}, last_flush=now - 86_400)  # nothing waits: a quiet night
    got = families({"a": never, "b": gone, "c": quiet}, now)
    assert got["preagg_group_stalled"] == [
        ({"topic": "a"}, 1.0),
        ({"topic": "b"}, 1.0),
        ({"topic": "c"}, 0.0),
    ]
    assert ({"topic": "a"}, 0.0) not in got["preagg_group_seconds_since_flush"]  # never: no figure
