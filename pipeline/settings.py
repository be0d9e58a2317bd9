"""Settings of a preagg deployment, read from ``PREAGG_*`` environment variables.

Each setting says what it trades off, in the manner of Faust's settings. Nothing
else in the package reads the environment, so tests and tools pass a
:class:`Settings` explicitly.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


@dataclass(frozen=True)
class Settings:
    """Everything a producer, worker, query or operator command needs to know."""

    #: Kafka bootstrap servers (``host:port[,host:port]`` or ``kafka://host:port``).
    #: ``None`` means: use the embedded broker started by ``preagg services up``.
    kafka_url: str | None = None
    #: MongoDB URL (credentials and TLS options go here, never into logs).
    #: ``None`` means: use the embedded SecantusDB started by ``preagg services up``.
    mongo_url: str | None = None
    #: Database holding the pre-aggregated collections.
    db: str = "preagg"
    #: Topic of raw web hits.
    hits_topic: str = "hits"
    #: Topic receiving rejected input with its reason and original bytes.
    deadletter_topic: str = "preagg-deadletter"
    #: Partitions of topics the project creates. More partitions allow more worker
    #: replicas (one partition is read by one worker) but cost broker memory.
    partitions: int = 4
    #: Consumer group of the workers; replicas with the same id share partitions.
    group_id: str = "preagg"
    #: Seconds between flushes. Shorter: fresher charts, more MongoDB writes
    #: (each flush writes every touched document once). Longer: fewer, larger writes.
    flush_interval: float = 1.0
    #: A flush also starts once this many distinct (site, page, minute) keys are
    #: pending; bounds worker memory when traffic is wide.
    max_pending_keys: int = 100_000
    #: Events dated more than this many seconds in the future (by the worker's
    #: clock) are dead-lettered instead of counted: they are clock errors.
    future_skew: float = 300.0
    #: Most ``$inc`` counters in one upsert; a wider document update (only backfills
    #: make them) is split into several upserts of the same document in the same bulk
    #: write. ``0``: never split, one upsert per document (right for MongoDB).
    #: ``None``: automatic, 64 on the embedded SecantusDB, whose per-update cost grows
    #: with the square of its fields, and 0 on a configured MongoDB.
    max_fields_per_update: int | None = None
    #: Largest accepted event (one line), in bytes. Larger ones are dead-lettered.
    max_event_bytes: int = 16_384
    #: Events per Kafka message when producers pack (1 = one event per message).
    #: Packing amortises the per-message cost of Kafka and Faust (~200 us each).
    pack_size: int = 100
    #: Kafka session timeout, seconds. The embedded broker holds a group join for
    #: half of it, so short values make rebalances fast; too short evicts a busy worker.
    session_timeout: float = 10.0
    #: Where embedded services keep their state, data and logs.
    home: Path = field(default_factory=lambda: Path(".preagg"))
    #: Identity of this worker process (logs and status).
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    #: Port of the worker's web server (0: disabled).
    web_port: int = 0

    @classmethod
    def from_env(cls) -> Settings:
        """Read settings from ``PREAGG_*`` variables; unset ones keep their defaults."""
        d = cls()
        return cls(
            kafka_url=os.environ.get("PREAGG_KAFKA_URL") or None,
            mongo_url=os.environ.get("PREAGG_MONGO_URL") or None,
            db=os.environ.get("PREAGG_DB") or d.db,
            hits_topic=os.environ.get("PREAGG_HITS_TOPIC") or d.hits_topic,
            deadletter_topic=os.environ.get("PREAGG_DEADLETTER_TOPIC") or d.deadletter_topic,
            partitions=_env_int("PREAGG_PARTITIONS", d.partitions),
            group_id=os.environ.get("PREAGG_GROUP_ID") or d.group_id,
            flush_interval=_env_float("PREAGG_FLUSH_INTERVAL", d.flush_interval),
            max_pending_keys=_env_int("PREAGG_MAX_PENDING_KEYS", d.max_pending_keys),
            future_skew=_env_float("PREAGG_FUTURE_SKEW", d.future_skew),
            max_fields_per_update=(
                int(os.environ["PREAGG_MAX_FIELDS_PER_UPDATE"])
                if os.environ.get("PREAGG_MAX_FIELDS_PER_UPDATE")
                else None
            ),
            max_event_bytes=_env_int("PREAGG_MAX_EVENT_BYTES", d.max_event_bytes),
            pack_size=_env_int("PREAGG_PACK_SIZE", d.pack_size),
            session_timeout=_env_float("PREAGG_SESSION_TIMEOUT", d.session_timeout),
            home=Path(os.environ.get("PREAGG_HOME") or d.home),
            web_port=_env_int("PREAGG_WEB_PORT", d.web_port),
        )

    def with_(self, **changes: object) -> Settings:
        """A copy with some settings changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def fields_per_update(self) -> int:
        """Effective split width (``None`` resolves to 0 here; embedded resolution sets 64)."""
        return self.max_fields_per_update or 0

    @property
    def kafka_bootstrap(self) -> str:
        """Bootstrap servers without a ``kafka://`` scheme, as aiokafka wants them."""
        if self.kafka_url is None:
            raise RuntimeError("no Kafka URL: start `preagg services up` or set PREAGG_KAFKA_URL")
        return ",".join(part.split("://", 1)[-1] for part in self.kafka_url.split(",") if part.strip())

    @property
    def faust_broker(self) -> str:
        """The broker URL in Faust's ``kafka://host:port;host:port`` form."""
        return ";".join(f"kafka://{hp}" for hp in self.kafka_bootstrap.split(","))
