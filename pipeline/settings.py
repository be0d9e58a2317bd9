"""Settings of a preagg deployment, read from ``PREAGG_*`` environment variables.

Each setting says what it trades off, in the manner of Faust's settings. Nothing
else in the package reads the environment, so tests and tools pass a
:class:`Settings` explicitly.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import Field, dataclass, field, fields, replace
from functools import cache, lru_cache
from pathlib import Path
from stat import S_ISREG
from types import UnionType
from typing import Any, Generic, Literal, Protocol, TypeVar, Union, get_args, get_origin, get_type_hints

from pipeline.core.errors import InputError
from pipeline.core.fields import FieldMode
from pipeline.core.shippers import InputFormat

T = TypeVar("T")

CommitMode = Literal["exactly_once", "at_least_once"]
KafkaSecurity = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]

#: The stream kinds a deployment runs unless ``PREAGG_KINDS`` says otherwise (pipeline/kinds/).
BUILTIN_KINDS = ("hits", "impressions", "relations", "listens")


class SettingsError(InputError):
    """A ``PREAGG_*`` variable holds a value the setting cannot take; the message names it."""


def env_name(field_name: str, prefix: str = "PREAGG_") -> str:
    """The environment variable of a setting: the prefix + its upper-case name."""
    return f"{prefix}{field_name.upper()}"


def _parse(var: str, raw: str, hint: Any) -> Any:
    """``raw`` as a value of the annotated type ``hint``; the error names the variable."""
    if get_origin(hint) in (UnionType, Union):  # X | None: an empty variable is left unset by the caller
        hint = next(a for a in get_args(hint) if a is not type(None))
    if get_origin(hint) is Literal:
        choices = get_args(hint)
        if raw not in choices:
            raise SettingsError(f"{var}={raw!r}: expected one of {', '.join(map(str, choices))}")
        return raw
    if get_origin(hint) is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    try:
        if hint is bool:
            if raw.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError(raw)
            return raw.lower() in ("1", "true", "yes", "on")
        if hint in (int, float, Path, str):
            return hint(raw)
    except ValueError:
        kind = {int: "an integer", float: "a number", bool: "true or false"}.get(hint, str(hint))
        raise SettingsError(f"{var}={raw!r}: expected {kind}") from None
    raise TypeError(f"{var}: settings of type {hint!r} cannot be read from the environment")


def env_fields(cls: type[Any]) -> list[Field[Any]]:
    """The fields of a settings dataclass read from a variable of their own (``<prefix><FIELD>``)."""
    return [f for f in fields(cls) if f.init and f.metadata.get("env") is not False]


def read_env(cls: type[T], prefix: str, environ: Mapping[str, str]) -> T:
    """An instance of the frozen dataclass ``cls`` from ``<prefix><FIELD>`` variables.

    Each value is converted to its field's annotated type (``int``, ``float``, ``bool``,
    ``Path``, ``str``, a ``Literal`` of words, a ``tuple[str, ...]`` written with commas,
    or any of them ``| None``); unset or empty variables keep their defaults.
    """
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in env_fields(cls):
        var = env_name(f.name, prefix)
        raw = environ.get(var)
        if raw:
            values[f.name] = _parse(var, raw, hints[f.name])
    return cls(**values)


def write_env(obj: object, prefix: str) -> dict[str, str]:
    """The ``<prefix><FIELD>`` variables that :func:`read_env` turns back into ``obj``."""
    out = {}
    for f in env_fields(type(obj)):
        value = getattr(obj, f.name)
        if value is None:
            continue
        out[env_name(f.name, prefix)] = ",".join(value) if isinstance(value, tuple) else str(value)
    return out


#: The settings file read when ``PREAGG_CONFIG`` names none: ``preagg.toml`` in the working directory.
SETTINGS_FILE = "preagg.toml"


def settings_file_env(path: str | None = None) -> dict[str, str]:
    """The settings file's values as ``PREAGG_*`` variables (none when there is no file).

    ``PREAGG_CONFIG`` names the file (default ``./preagg.toml``). Top-level keys are
    settings (``kafka_url = "..."`` is ``PREAGG_KAFKA_URL``), a table is a kind's
    (``[hits]`` ``query_string = "keep"`` is ``PREAGG_HITS_QUERY_STRING``); lists are
    written with commas, booleans as ``true``/``false``. The environment overrides it.
    A command asks several times (its parser, its settings): the file is parsed once
    per version of it (path, modification time, size).
    """
    name = path or os.environ.get("PREAGG_CONFIG") or SETTINGS_FILE
    try:
        stat = Path(name).stat()
    except OSError:
        stat = None
    if stat is None or not S_ISREG(stat.st_mode):
        if path or os.environ.get("PREAGG_CONFIG"):
            raise SettingsError(f"PREAGG_CONFIG={name}: no such file")
        return {}
    return dict(_settings_file(name, str(Path(name).resolve()), stat.st_mtime_ns, stat.st_size))


@lru_cache(maxsize=8)
def _settings_file(name: str, resolved: str, mtime_ns: int, size: int) -> dict[str, str]:
    """Parse one version of a settings file (the cache key is what tells versions apart)."""
    import tomllib

    try:
        data = tomllib.loads(Path(resolved).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"{name}: {exc}") from None
    out: dict[str, str] = {}

    def text(key: str, value: object) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, list):
            return ",".join(str(v) for v in value)
        if isinstance(value, str | int | float):
            return str(value)
        raise SettingsError(f"{name}: {key}: expected a string, number, boolean or list")

    for key, value in data.items():
        if isinstance(value, dict):
            for sub_key, sub_value in value.items():
                out[env_name(sub_key, kind_prefix(key))] = text(f"{key}.{sub_key}", sub_value)
        else:
            out[env_name(key)] = text(key, value)
    return out


def kind_prefix(kind: str) -> str:
    """Prefix of one stream kind's variables: ``PREAGG_HITS_`` for ``hits``."""
    return f"PREAGG_{kind.upper().replace('-', '_')}_"


@dataclass(frozen=True)
class StreamSettings:
    """What every stream kind's settings have; a kind's own dataclass extends it.

    Read from ``PREAGG_<KIND>_<FIELD>`` (``PREAGG_HITS_TOPIC``...).
    """

    #: Input topic of the kind (empty: the kind's name).
    topic: str = ""
    #: What the topic's messages hold (docs/ingest.md): ``event``, our JSON events, one or
    #: many per message (the fastest: no envelope to open); ``clf``, bare access-log lines
    #: (hits only); ``vector``, ``filebeat``, ``fluentbit``, that shipper's default JSON
    #: envelope around a log line; ``auto``, detected per message (mixed producers on one
    #: topic, for a little more CPU per message). Lines that fit no shape are dead-lettered.
    format: InputFormat = "event"
    #: Lateness horizon in seconds (0: off, the default, so backfills of old logs count).
    #: An event older than this when decoded is dead-lettered with reason ``late``, counted
    #: in metrics and ``preagg status``; ``preagg deadletters replay --reason late`` sends
    #: such events back when they belong after all. On: charts of the recent past stop
    #: changing after the horizon; off: every event counts, however late.
    lateness: float = 0.0


S = TypeVar("S", bound=StreamSettings)
S_co = TypeVar("S_co", bound=StreamSettings, covariant=True)


@cache
def _stream_from_env(cls: type[S], prefix: str, env: frozenset[tuple[str, str]]) -> S:
    """A kind's settings from its variables (cached: :meth:`Settings.of` is asked often).

    Read with :class:`StreamSettings` (the fields every kind has), a kind known only by
    name gives its topic; its own variables are ignored then.
    """
    return read_env(cls, prefix, dict(env))


@dataclass(frozen=True)
class StreamKey(Generic[S]):
    """A kind's name and settings type: what :meth:`Settings.of` needs, without the kind.

    A kind's CLI and API modules read its settings through this; importing the kind
    itself from them would be a cycle (the kind imports them).
    """

    name: str
    settings_type: type[S]


class KindSettingsSource(Protocol[S_co]):
    """What :meth:`Settings.of` needs of a stream kind: its name and its settings type."""

    @property
    def name(self) -> str: ...

    @property
    def settings_type(self) -> type[S_co]: ...


#: Option names whose values are secrets wherever they appear in a URL's query string.
_SECRET_OPTION = re.compile(r"(password|secret|token|authmechanismproperties)", re.IGNORECASE)


def redact_url(text: str) -> str:
    """``scheme://user:secret@host/?k=secret`` → ``scheme://user:***@host/?k=***`` (other text unchanged).

    Not :func:`urllib.parse.urlsplit`: a password may hold ``,`` ``/`` ``?`` ``#`` unescaped
    (drivers accept some of them), and splitting there would print its tail. Everything
    between ``://`` and the last ``@`` is the user information; options named like a
    secret (``password``, ``tlsCertificateKeyFilePassword``, ``authMechanismProperties``)
    are hidden too.
    """
    if "://" not in text:
        return text
    scheme, rest = text.split("://", 1)
    at = rest.rfind("@")
    if at >= 0:
        user = rest[:at].split(":", 1)[0]
        rest = f"{user}:***@{rest[at + 1 :]}" if ":" in rest[:at] else f"{user}@{rest[at + 1 :]}"
    base, sep, query = rest.partition("?")
    if sep:
        options = []
        for option in query.split("&"):
            name, eq, _ = option.partition("=")
            options.append(f"{name}=***" if eq and _SECRET_OPTION.search(name) else option)
        rest = base + "?" + "&".join(options)
    return f"{scheme}://{rest}"


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
    #: Topic receiving rejected input with its reason and original bytes.
    deadletter_topic: str = "preagg-deadletter"
    #: Partitions of topics the project creates. More partitions allow more worker
    #: replicas (one partition is read by one worker) but cost broker memory.
    partitions: int = 4
    #: Replication factor of the topics ``preagg setup`` creates. ``0``: the broker's
    #: ``default.replication.factor`` (at most the number of brokers). 3 survives a broker
    #: loss with ``min_insync_replicas`` 2; 1 is for a single broker (the embedded one).
    replication_factor: int = 0
    #: ``min.insync.replicas`` of the topics setup creates (``None``: the broker's). With
    #: ``acks=all`` a write needs this many replicas: 2 of 3 loses nothing when one fails.
    min_insync_replicas: int | None = None
    #: Largest Kafka message producers send, bytes: packs are closed below it. Kafka's
    #: default ``max.message.bytes`` is 1 MB; the topic's own value is used when lower.
    max_message_bytes: int = 1_000_000
    #: Idempotent producers (``acks=all`` always): a broker failover then never writes a
    #: message twice. ``auto``: on where the broker supports it (Apache Kafka does; the
    #: embedded broker does not, and producers then warn once), ``on``: required, ``off``.
    producer_idempotence: Literal["auto", "on", "off"] = "auto"
    #: Create missing topics, collections and indexes when a worker or producer starts
    #: (``None``: on with the embedded services, off with configured servers, where
    #: ``preagg setup`` does it once and workers only check).
    auto_setup: bool | None = None
    #: Set when ``kafka_url`` is the embedded broker (Tansu): workarounds for its quirks
    #: (ListOffsets one batch short, a consistency check that crashes on its answers)
    #: apply only then, so a real cluster pays nothing for them.
    embedded_kafka: bool = False
    #: Consumer group of the workers; replicas with the same id share partitions.
    group_id: str = "preagg"
    #: Seconds between the starts of two flushes (a flush longer than this is
    #: followed at once by the next). Shorter: fresher charts, more MongoDB writes
    #: (each flush writes every touched document once). Longer: fewer, larger writes.
    flush_interval: float = 1.0
    #: A flush also starts once this many distinct (site, page, minute) keys are
    #: pending; bounds worker memory when traffic is wide (about 370 bytes per hits key,
    #: measured: 400,000 keys ~150 MB). With idempotent writes it is the size bound of a
    #: batch: a backlog whose keys fit in it is written once per document; twice the keys,
    #: about twice the writes (docs/benchmarks.md). Lower for small containers.
    max_pending_keys: int = 400_000
    #: While a worker is behind its partitions' ends by more than 1,000 messages (catching
    #: up a backlog: a restart, a new group, a replay), a batch is flushed when it reaches
    #: ``max_pending_keys`` or is this many seconds old, not every ``flush_interval``: each
    #: document is then written once per batch instead of once per second
    #: (before: 189,000 upserts for 20,000 documents). ``0``: flush every ``flush_interval`` always.
    #: Longer: fewer writes in a backlog; the backlog's counts appear later.
    backlog_flush_interval: float = 20.0
    #: Events dated more than this many seconds in the future (by the worker's
    #: clock) are dead-lettered instead of counted: they are clock errors.
    future_skew: float = 300.0
    #: Most ``$inc`` counters in one upsert; a wider document update (only backfills
    #: make them) is split into several upserts of the same document in the same bulk
    #: write, each with the document's ``$setOnInsert``, whichever inserts it.
    #: ``0``: never split, one upsert per document (right for MongoDB).
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
    #: Kafka rebalance timeout, seconds: how long the group waits for a member to rejoin
    #: before it evicts it. A worker bounds its own drain of a rebalance at half of this
    #: (uncommitted batches are then dropped, unacked, and read again: exactly-once keeps
    #: that safe), so a slow or absent store never gets it evicted. Longer lets slow
    #: commits finish before a rebalance gives up on them; shorter rebalances faster.
    rebalance_timeout: float = 60.0
    #: Where embedded services keep their state, data and logs.
    home: Path = field(default_factory=lambda: Path(".preagg"))
    #: How the worker and ``preagg serve`` log: ``text`` (a line per event, for a terminal)
    #: or ``json`` (one object per line, for a log collector). Either way the libraries
    #: (Faust, aiokafka) log warnings and errors only, unless ``--loglevel debug``.
    log_format: Literal["text", "json"] = "text"
    #: One INFO line per flush (events, documents, bytes, seconds, offsets) instead of one
    #: progress line a minute. On: what a drill or a benchmark reads; a worker flushing every
    #: second then writes a line a second. ``--loglevel debug`` shows them too.
    log_flushes: bool = False
    #: Identity of this worker process (logs and status).
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    #: Port of the worker's web server: Prometheus ``/metrics`` and ``/health``
    #: (0: disabled). Bound to 127.0.0.1 unless ``web_bind`` says otherwise.
    web_port: int = 0
    #: Address of the worker's web server. ``0.0.0.0`` exposes metrics to a scraper
    #: on another host (the compose file does so inside its private network).
    web_bind: str = "127.0.0.1"
    #: Port of ``preagg serve``, the query API and dashboard (its own process: it scales
    #: apart from ingestion, and a slow chart never delays a flush).
    serve_port: int = 8900
    #: Address ``preagg serve`` binds. The default keeps it on this machine; ``0.0.0.0``
    #: exposes it, and then a ``serve_token`` should guard it.
    serve_bind: str = "127.0.0.1"
    #: Bearer token the query API requires (``Authorization: Bearer <token>``); empty:
    #: none. The dashboard asks for it once and keeps it for the browser tab.
    serve_token: str = field(default="", repr=False)
    #: Origins allowed to call the query API from another site's pages (CORS),
    #: comma-separated, e.g. ``https://grafana.example.com``; empty: none (same origin only).
    serve_cors: tuple[str, ...] = ()
    #: Host names (``Host`` header, port ignored) the server answers, comma-separated;
    #: empty: the loopback names when bound to a loopback address, the bound address and
    #: the loopback names when bound to one address, any name when bound to 0.0.0.0/::.
    #: Refusing other names defeats DNS rebinding (a web page on a rebinding domain
    #: reading an API that has no token); list the names a proxy forwards.
    serve_hosts: tuple[str, ...] = ()
    #: Requests reading the store at once in ``preagg serve``; more wait for a slot within
    #: their deadline, then answer 503 with ``Retry-After``. Higher serves more analysts
    #: at once, and takes more of the store's time from the workers' flushes.
    serve_concurrency: int = 4
    #: Deadline of one API request, seconds (waiting for a read slot and every MongoDB read
    #: of it together): past it the request answers 503 rather than holding a connection.
    #: Longer lets wide ranges finish on a slow store.
    query_timeout: float = 10.0
    #: ``exactly_once``: each flush commits its aggregates and its source offsets in one
    #: MongoDB transaction guarded by offset fences (needs a replica set, a sharded
    #: cluster or the embedded store). ``at_least_once``: plain bulk writes, for a
    #: standalone mongod; a crash between write and Kafka commit double counts.
    commit_mode: CommitMode = "exactly_once"
    #: ``/health`` reports unhealthy when data is pending and the last successful
    #: flush is older than this many seconds (store down or too slow).
    health_max_flush_age: float = 30.0
    #: Kafka security: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
    kafka_security_protocol: KafkaSecurity = "PLAINTEXT"
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
    schema: FieldMode = "compact"
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
    #: Seconds a command (and a worker's start check) waits to reach MongoDB before it
    #: says, in one line, which URL did not answer. Longer tolerates a slow failover.
    connect_timeout: float = 5.0
    #: Deadline of every other MongoDB call (client ``timeoutMS``), seconds: a lost
    #: primary or a hung server shows up as a logged, retried error, not a hang.
    mongo_timeout: float = 20.0
    #: Ids per ``$in`` when documents are read by id (sketches, filters, names). The
    #: embedded store answers ``$in`` in time quadratic in its length (fastest at
    #: 20-100); 50 costs MongoDB one round trip per 50 documents (docs/benchmarks.md).
    read_chunk: int = 50
    #: Seconds a worker may take to stop after SIGTERM/SIGINT (or after a crash),
    #: whatever is unreachable. Past it the process leaves its group and exits at once;
    #: what was not committed is consumed again (exactly-once makes that safe). Keep it
    #: below the supervisor's grace period (Kubernetes: 30 s; compose here: 60 s) so the
    #: worker, not SIGKILL, ends the stop, and leaves the group on the way out.
    shutdown_timeout: float = 20.0
    #: Fault injection for tests and chaos runs only: ``POINT:N`` exits the worker
    #: with status 137 (as kill -9) the N-th time a flush reaches POINT
    #: (``before-commit``, ``mid-commit`` or ``after-commit``). Empty in production.
    fault: str = ""

    #: The stream kinds this deployment runs, comma-separated: built-in kind names
    #: (``hits``, ``impressions``, ``relations``, ``listens``) or ``module:attribute``
    #: of a kind defined elsewhere. A worker consumes the topics of exactly these;
    #: fewer kinds per worker let each kind scale on its own replicas.
    kinds: tuple[str, ...] = BUILTIN_KINDS
    #: Per kind, settings set in code (:meth:`with_stream`); a kind missing here has
    #: what the environment says (``PREAGG_<KIND>_*``), else its defaults. Use :meth:`of`.
    streams: Mapping[str, StreamSettings] = field(
        default_factory=dict, hash=False, repr=False, metadata={"env": False}
    )
    #: The ``PREAGG_*`` variables :meth:`from_env` saw that are not fields here: each kind's own
    #: (``PREAGG_<KIND>_*``) are parsed when :meth:`of` is first asked for that kind,
    #: by its settings type. This layer knows no kind (the kinds import it), so a bad
    #: kind variable is reported when a command or worker first uses that kind.
    environ: Mapping[str, str] = field(default_factory=dict, hash=False, repr=False, metadata={"env": False})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``PREAGG_<FIELD>``; each kind's ``PREAGG_<KIND>_<FIELD>`` is kept for :meth:`of`.

        Without ``environ``: the process environment over the settings file, if any
        (:func:`settings_file_env`): a variable always wins over the file.
        """
        env: Mapping[str, str] = {**settings_file_env(), **os.environ} if environ is None else environ
        base = read_env(cls, "PREAGG_", env)
        own = {env_name(f.name) for f in fields(cls)}
        kept = {k: v for k, v in env.items() if k.startswith("PREAGG_") and k not in own}
        return replace(base, environ=kept)

    def to_env(self) -> dict[str, str]:
        """``PREAGG_*`` variables that reproduce these settings in a child process."""
        out = dict(self.environ)
        out.update(write_env(self, "PREAGG_"))
        out.pop(env_name("worker_id"), None)
        for name, stream in self.streams.items():
            out.update(write_env(stream, kind_prefix(name)))
        return out

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={redact_url(v) if isinstance(v := getattr(self, f.name), str) else v!r}"
            for f in fields(self)
            if f.repr
        )
        return f"Settings({shown}, streams={dict(self.streams)!r})"

    def of(self, kind: KindSettingsSource[S]) -> S:
        """The settings of one stream kind: set in code, else from the environment, else defaults."""
        got = self.streams.get(kind.name)
        if not isinstance(got, kind.settings_type):
            got = _stream_from_env(kind.settings_type, kind_prefix(kind.name), self._kind_env(kind.name))  # type: ignore[arg-type]
        if not got.topic:
            got = replace(got, topic=kind.name)
        return got

    def _kind_env(self, name: str) -> frozenset[tuple[str, str]]:
        prefix = kind_prefix(name)
        return frozenset((k, v) for k, v in self.environ.items() if k.startswith(prefix))

    def with_stream(self, kind: KindSettingsSource[S], **changes: object) -> Settings:
        """A copy with some settings of one kind changed."""
        changed = replace(self.of(kind), **changes)  # type: ignore[arg-type]
        return replace(self, streams={**self.streams, kind.name: changed})

    def topic(self, kind: str) -> str:
        """Input topic of the kind named ``kind``: ``PREAGG_<KIND>_TOPIC``, else the kind's name."""
        got = self.streams.get(kind)
        if got is None:
            got = _stream_from_env(StreamSettings, kind_prefix(kind), self._kind_env(kind))
        return got.topic or kind

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
