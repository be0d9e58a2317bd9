"""Settings of a preagg deployment, read from ``PREAGG_*`` environment variables.

Each setting says what it trades off, in the manner of Faust's settings. Nothing
else in the package reads the environment, so tests and tools pass a
:class:`Settings` explicitly.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_INTS = {
    "partitions",
    "max_pending_keys",
    "max_fields_per_update",
    "max_event_bytes",
    "pack_size",
    "web_port",
    "relation_user_capacity",
    "relation_item_capacity",
    "listen_hll_precision",
    "listen_heard_capacity",
    "props_max_names",
    "props_max_values",
    "props_max_per_event",
    "props_max_bytes",
    "name_store_doc_cap",
    "commit_max_docs",
    "commit_max_bytes",
    "read_chunk",
}
_FLOATS = {
    "flush_interval",
    "future_skew",
    "session_timeout",
    "health_max_flush_age",
    "relation_fpr",
    "listen_heard_fpr",
    "commit_target_seconds",
    "commit_timeout",
    "mongo_timeout",
    "shutdown_timeout",
}


def env_name(field_name: str) -> str:
    """The environment variable of a setting: ``PREAGG_`` + its upper-case name."""
    return f"PREAGG_{field_name.upper()}"


class SettingsError(ValueError):
    """A ``PREAGG_*`` variable holds a value the setting cannot take; the message names it."""


#: Settings that take one of a few words.
_CHOICES = {"schema": ("compact", "readable"), "commit_mode": ("exactly_once", "at_least_once")}


def _convert(name: str, raw: str) -> Any:
    try:
        if name in _INTS:
            return int(raw)
        if name in _FLOATS:
            return float(raw)
    except ValueError:
        kind = "an integer" if name in _INTS else "a number"
        raise SettingsError(f"{env_name(name)}={raw!r}: expected {kind}") from None
    if name in _CHOICES and raw not in _CHOICES[name]:
        raise SettingsError(f"{env_name(name)}={raw!r}: expected one of {', '.join(_CHOICES[name])}")
    if name == "home":
        return Path(raw)
    return raw


def redact_url(text: str) -> str:
    """``scheme://user:secret@host`` → ``scheme://user:***@host`` (any other text unchanged)."""
    if "@" not in text or "://" not in text:
        return text
    parts = []
    for one in text.split(","):
        try:
            u = urlsplit(one)
        except ValueError:
            parts.append("***")
            continue
        if u.password is None:
            parts.append(one)
            continue
        host = u.netloc.rsplit("@", 1)[1]
        parts.append(urlunsplit(u._replace(netloc=f"{u.username}:***@{host}")))
    return ",".join(parts)


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
    #: Topic of impressions (user was shown item).
    impressions_topic: str = "impressions"
    #: Topic of user–item relations (likes, ratings of 4 or more).
    relations_topic: str = "relations"
    #: Target false-positive rate of the relation Bloom filters. Lower: bigger filters.
    relation_fpr: float = 0.005
    #: Items a user's filter is sized for (its false-positive rate passes ``relation_fpr``
    #: once the user has more relations). Size it near the 99th percentile.
    relation_user_capacity: int = 300
    #: Users an item's filter is sized for.
    relation_item_capacity: int = 300
    #: Topic of listens (user heard song, tagged tag).
    listens_topic: str = "listens"
    #: HyperLogLog precision of listen sketches: 2^p registers, standard error
    #: 1.04 / sqrt(2^p) (p = 12: 1.6%, 3 KB dense). Higher: more accurate, bigger.
    listen_hll_precision: int = 12
    #: Songs a (user, tag) "heard" filter is sized for, and its false-positive rate.
    listen_heard_capacity: int = 1000
    listen_heard_fpr: float = 0.01
    #: Topic receiving rejected input with its reason and original bytes.
    deadletter_topic: str = "preagg-deadletter"
    #: Partitions of topics the project creates. More partitions allow more worker
    #: replicas (one partition is read by one worker) but cost broker memory.
    partitions: int = 4
    #: Consumer group of the workers; replicas with the same id share partitions.
    group_id: str = "preagg"
    #: Seconds between the starts of two flushes (a flush longer than this is
    #: followed at once by the next). Shorter: fresher charts, more MongoDB writes
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
    #: Port of the worker's web server: Prometheus ``/metrics`` and ``/health``
    #: (0: disabled). Bound to 127.0.0.1 unless ``web_bind`` says otherwise.
    web_port: int = 0
    #: Address of the worker's web server. ``0.0.0.0`` exposes metrics to a scraper
    #: on another host (the compose file does so inside its private network).
    web_bind: str = "127.0.0.1"
    #: ``exactly_once``: each flush commits its aggregates and its source offsets in one
    #: MongoDB transaction guarded by offset fences (needs a replica set, a sharded
    #: cluster or the embedded store). ``at_least_once``: plain bulk writes, for a
    #: standalone mongod; a crash between write and Kafka commit double counts.
    commit_mode: str = "exactly_once"
    #: ``/health`` reports unhealthy when data is pending and the last successful
    #: flush is older than this many seconds (store down or too slow).
    health_max_flush_age: float = 30.0
    #: Kafka security: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
    kafka_security_protocol: str = "PLAINTEXT"
    #: SASL mechanism (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``) when SASL is on.
    kafka_sasl_mechanism: str = "PLAIN"
    #: SASL user name.
    kafka_sasl_username: str = ""
    #: SASL password. Never logged, never in metrics, hidden from ``repr``.
    kafka_sasl_password: str = field(default="", repr=False)
    #: CA bundle to verify the brokers' TLS certificates (empty: system CAs).
    kafka_ssl_cafile: str = ""
    #: Client certificate and key for mutual TLS (empty: none).
    kafka_ssl_certfile: str = ""
    kafka_ssl_keyfile: str = ""
    #: Stored field names: ``compact`` (short names such as ``m``, ``h``; custom
    #: property names and values as name-store tokens) or ``readable`` (the names
    #: ``preagg schema`` lists, property names and values as sent). Compact saves
    #: space in every document; readable is easier to query by hand. Choose once per
    #: database: a worker refuses a database written in the other mode.
    schema: str = "compact"
    #: Most distinct custom property names per site, and most distinct values per
    #: property. Past them, new names (values) are counted under the token ``other``:
    #: a producer sending unbounded names (a user id as a name) cannot grow the name
    #: store or the documents without bound. Higher: more detail, bigger documents.
    props_max_names: int = 1000
    props_max_values: int = 10_000
    #: Most custom properties on one hit, and longest property name or value in
    #: UTF-8 bytes; a hit over either limit is dead-lettered (``props``).
    props_max_per_event: int = 32
    props_max_bytes: int = 128
    #: Names one name-store document holds before the next document starts (the
    #: seed's array cap). Larger: fewer documents to read cold; each push rewrites
    #: a bigger array.
    name_store_doc_cap: int = 1000
    #: Most documents one commit (one MongoDB transaction) writes: a batch is sealed,
    #: and committed on its own, once its planned documents reach this (or its bytes
    #: ``commit_max_bytes``, whichever comes first). Larger: more events aggregated
    #: per document write when many documents are live, fewer transactions in a
    #: backfill; smaller: shorter transactions, less cache pressure on the primary and
    #: less work redone after a conflict. The flusher lowers it by itself while
    #: commits are slow or fail for their size (see ``commit_target_seconds``).
    commit_max_docs: int = 2000
    #: Most bytes of update statements in one commit. A batch is sealed when its
    #: estimated bytes reach this; a commit whose real statements exceed it is split
    #: before anything is sent. Stays far below MongoDB's 16 MB per document and
    #: its transaction cache limits (``TransactionTooLargeForCache``).
    commit_max_bytes: int = 8_000_000
    #: Duration a commit aims at: a slower one lowers the document bound in
    #: proportion, fast ones let it grow back. Lower: fresher data after a burst, more
    #: transactions; higher: fewer, longer transactions.
    commit_target_seconds: float = 5.0
    #: Deadline of one whole commit (reads, writes and commitTransaction), seconds.
    #: Must stay below the server's ``transactionLifetimeLimitSeconds`` (60 s by
    #: default), which counts from the transaction's start. A commit past it is
    #: aborted and its batch split and retried.
    commit_timeout: float = 30.0
    #: Deadline of every other MongoDB call (client ``timeoutMS``), seconds: a lost
    #: primary or a hung server shows up as a logged, retried error, not a hang.
    mongo_timeout: float = 20.0
    #: Ids per ``$in`` when documents are read by id (sketches, filters, names). The
    #: embedded store answers ``$in`` in time quadratic in its length (fastest at
    #: 20-100); 50 costs MongoDB one round trip per 50 documents (docs/benchmarks.md).
    read_chunk: int = 50
    #: Seconds a worker may take to stop after SIGTERM/SIGINT, whatever is
    #: unreachable. Past it the process exits at once; what was not committed is
    #: not committed (exactly-once makes that safe: it is consumed again).
    shutdown_timeout: float = 30.0
    #: Fault injection for tests and chaos runs only: ``POINT:N`` exits the worker
    #: with status 137 (as kill -9) the N-th time a flush reaches POINT
    #: (``before-commit``, ``mid-commit`` or ``after-commit``). Empty in production.
    fault: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``PREAGG_<FIELD>`` variables; unset or empty ones keep their defaults."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(env_name(f.name))
            if raw:
                values[f.name] = _convert(f.name, raw)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """``PREAGG_*`` variables that reproduce these settings in a child process."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and f.name != "worker_id":
                out[env_name(f.name)] = str(value)
        return out

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={redact_url(v) if isinstance(v := getattr(self, f.name), str) else v!r}"
            for f in fields(self)
            if f.repr
        )
        return f"Settings({shown})"

    def named(self, tag: str) -> Settings:
        """A copy whose database, topics and group carry ``tag``: runs that share servers stay apart."""
        return self.with_(
            db=f"preagg_{tag}".replace("-", "_"),
            hits_topic=f"hits-{tag}",
            impressions_topic=f"impressions-{tag}",
            relations_topic=f"relations-{tag}",
            listens_topic=f"listens-{tag}",
            deadletter_topic=f"deadletter-{tag}",
            group_id=f"preagg-{tag}",
        )

    def with_(self, **changes: object) -> Settings:
        """A copy with some settings changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

    @property
    def stream_topics(self) -> list[str]:
        """The input topics the workers consume, one per stream kind."""
        return [self.hits_topic, self.impressions_topic, self.relations_topic, self.listens_topic]

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
