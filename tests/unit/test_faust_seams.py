"""Every private name of faust-streaming and aiokafka the worker relies on still exists.

``worker/consumer.py``, ``rebalance.py`` and ``shutdown.py`` override or call private
attributes of Faust's consumer, its consumer thread, its app and its worker, and of
aiokafka's consumer and coordinator. pyproject.toml pins faust-streaming to the minor
the tests cover; this test is what fails first when an upgrade renames one of them.
"""

from __future__ import annotations

import inspect

import aiokafka
import faust
import mode
from aiokafka.consumer.group_coordinator import CoordinatorGroupRebalance, GroupCoordinator
from faust.tables import TableManager
from faust.transport.consumer import Consumer as BaseConsumer
from faust.transport.drivers import aiokafka as faust_aiokafka

#: (class, name): methods and attributes the worker overrides, calls or reads, each with why no
#: public hook serves (faust-streaming 0.15.3, the newest release, and aiokafka 0.14).
SEAMS = [
    # The consumer preagg hands records to in lists per partition: Faust builds its consumer
    # thread and aiokafka consumer here, with no setting to choose their classes.
    (faust_aiokafka.AIOKafkaConsumerThread, "_create_worker_consumer"),
    (faust_aiokafka.Consumer, "_new_consumer_thread"),
    # Records a fetch at a time, not an event at a time: Faust's only delivery is per event
    # through its stream machinery (22 µs an event against 2 µs).
    (BaseConsumer, "_drain_messages"),
    (BaseConsumer, "_wait_next_records"),
    (BaseConsumer, "_to_message"),
    (BaseConsumer, "_new_topicpartition"),
    # Offsets Kafka skipped (transaction markers, compaction) acked as Faust acks them.
    (BaseConsumer, "_add_gap"),
    # The revoke bound: Faust's wait for acks has no deadline of its own.
    (BaseConsumer, "_wait_for_ack"),
    # LeaveGroup at exit and the embedded broker's ghost leader (rebalance.py): aiokafka
    # exposes no leave on demand nor the join's role.
    (GroupCoordinator, "_send_req"),
    (GroupCoordinator, "_maybe_leave_group"),
    (GroupCoordinator, "reset_generation"),
    (CoordinatorGroupRebalance, "_on_join_leader"),
    (CoordinatorGroupRebalance, "_on_join_follower"),
    # Public hooks (no underscore), listed because the worker overrides them.
    (mode.Worker, "on_setup_root_logger"),
    (faust.Worker, "on_setup_root_logger"),
    # The revoke bound on a rebalance's drain: Faust waits for every ack without a deadline.
    (faust.App, "_consumer_wait_empty"),
    # The table manager's start without its second of sleep (faust_conf.TablesAtOnce).
    (TableManager, "_update_channels"),
    (TableManager, "recovery"),
]

#: Instance attributes set in ``__init__`` (no class attribute to look up).
INIT_ATTRIBUTES = [
    (
        BaseConsumer,
        (
            "_acked",
            "_acked_index",
            "_committed_offset",
            "_n_acked",
            "_unacked_messages",
            "_waiting_for_ack",
            "_buffered_partitions",
        ),
    ),
    (aiokafka.AIOKafkaConsumer, ("_fetch_max_wait_ms", "_isolation_level")),
]


def test_the_private_methods_we_override_or_call_exist() -> None:
    missing = [f"{cls.__module__}.{cls.__qualname__}.{name}" for cls, name in SEAMS if not hasattr(cls, name)]
    assert not missing, missing


def test_the_private_attributes_we_read_are_set_by_their_constructors() -> None:
    missing = []
    for cls, names in INIT_ATTRIBUTES:
        source = inspect.getsource(cls)
        missing += [f"{cls.__qualname__}.{n}" for n in names if f"self.{n}" not in source]
    assert not missing, missing


def test_only_the_embedded_brokers_leader_skips_its_leave() -> None:
    from types import SimpleNamespace

    from pipeline.worker.rebalance import LEADER, skips_leave

    def coordinator(skip: bool, leader: bool) -> object:
        return SimpleNamespace(_preagg_skip_leader_leave=skip, **{LEADER: leader})

    assert skips_leave(coordinator(True, True))
    assert not skips_leave(coordinator(True, False))  # a follower leaves at once
    assert not skips_leave(coordinator(False, True))  # a real broker elects a new leader on a leave
    assert not skips_leave(SimpleNamespace())  # never joined


def test_a_worker_starts_faust_without_its_table_managers_second() -> None:
    """Faust's table manager sleeps a second before the consumer may subscribe; the worker's
    does not (it has no tables, and its topics are added before the app starts)."""
    import asyncio

    from pipeline.settings import Settings
    from pipeline.worker.faust_conf import TablesAtOnce, faust_settings

    app = faust.App("t", **faust_settings(Settings(kafka_url="kafka://127.0.0.1:9")))
    tables = app.tables
    assert isinstance(tables, TablesAtOnce)
    started: list[str] = []

    async def slept(*_: object) -> None:
        started.append("slept")

    async def channels() -> None:
        started.append("channels")

    async def recovery() -> None:
        started.append("recovery")

    tables.sleep = slept  # type: ignore[method-assign]
    tables._update_channels = channels  # type: ignore[method-assign]
    tables.recovery.start = recovery  # type: ignore[method-assign]
    asyncio.run(tables.on_start())
    assert started == ["channels", "recovery"]
