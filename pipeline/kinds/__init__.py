"""The registry of stream kinds: one folder each under ``pipeline/kinds/``, named in ``BUILTIN_KINDS``.

A built-in kind is registered by its name in ``pipeline.settings.BUILTIN_KINDS`` (the
registry below maps each name to ``pipeline.kinds.<name>``); nothing else lists kinds.
``PREAGG_KINDS`` picks the kinds a deployment runs, by these names or as
``module:attribute`` of a :class:`~pipeline.kinds.kind.Kind` defined elsewhere (a plugin,
or a test's example kind). See docs/design.md, "Adding a stream kind".
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from functools import cache
from typing import Any

from pipeline.kinds.kind import Kind, Stream, StreamContext
from pipeline.settings import BUILTIN_KINDS, Settings, SettingsError, env_fields, env_name, kind_prefix

#: Built-in kind name → the module whose ``KIND`` it is (imported on first use): one
#: folder each, named as the kind, listed once in ``pipeline.settings.BUILTIN_KINDS``.
REGISTRY: dict[str, str] = {name: f"pipeline.kinds.{name}" for name in BUILTIN_KINDS}


@cache
def kind_named(spec: str) -> Kind[Any]:
    """The kind a ``PREAGG_KINDS`` entry names: a registered name or ``module:attribute``."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
    elif spec in REGISTRY:
        module, attr = REGISTRY[spec], "KIND"
    else:
        raise SettingsError(
            f"PREAGG_KINDS: unknown stream kind {spec!r}: "
            f"expected one of {', '.join(REGISTRY)} or module:attribute"
        )
    kind = getattr(importlib.import_module(module), attr)
    if not isinstance(kind, Kind):
        raise SettingsError(f"PREAGG_KINDS: {spec}: {kind!r} is not a stream Kind")
    return kind


def load_kinds(specs: Iterable[str]) -> list[Kind[Any]]:
    """The kinds of ``specs`` in order; two kinds with one name are refused."""
    kinds = [kind_named(s) for s in specs]
    names = [k.name for k in kinds]
    if len(set(names)) != len(names):
        raise SettingsError(f"PREAGG_KINDS: stream kinds named twice: {', '.join(names)}")
    return kinds


def kind_in(specs: Iterable[str], name: str) -> Kind[Any]:
    """The kind called ``name`` among those ``specs`` (``PREAGG_KINDS``) load."""
    for kind in load_kinds(specs):
        if kind.name == name:
            return kind
    raise SettingsError(f"stream kind {name!r} is not among PREAGG_KINDS ({', '.join(specs)})")


#: ``PREAGG_*`` variables read outside the settings: the settings file's path, the embedded
#: store's oplog switch, a worker's restarts carried across ``exec``.
OTHER_VARIABLES = frozenset({"PREAGG_CONFIG", "PREAGG_EMBEDDED_OPLOG", "PREAGG_WORKER_RESTARTS"})
#: Variables of the test harness (tests/conftest.py), never the deployment's.
TEST_PREFIX = "PREAGG_TEST_"


def known_variables(settings: Settings) -> set[str]:
    """Every ``PREAGG_*`` variable a setting reads: the deployment's and each kind's (built-in and loaded)."""
    names = {env_name(f.name) for f in env_fields(Settings)}
    for kind in {kind_named(k) for k in (*REGISTRY, *settings.kinds)}:
        names |= {env_name(f.name, kind_prefix(kind.name)) for f in env_fields(kind.settings_type)}
    return names | OTHER_VARIABLES


def unknown_variables(settings: Settings) -> list[tuple[str, str | None]]:
    """``PREAGG_*`` variables (or settings-file keys) that no setting reads, each with the known
    name nearest to it: a misspelt setting is otherwise silently left at its default."""
    known = known_variables(settings)
    return [
        (name, next(iter(difflib.get_close_matches(name, known, n=1, cutoff=0.75)), None))
        for name in sorted(settings.environ)
        if name not in known and not name.startswith(TEST_PREFIX)
    ]


def stream_topics(settings: Settings) -> list[str]:
    """The input topics the workers consume, one per stream kind of ``settings.kinds``."""
    return [settings.of(k).topic for k in load_kinds(settings.kinds)]


def written_topics(settings: Settings) -> list[str]:
    """The topics the kinds of ``settings.kinds`` write besides dead letters (:meth:`Kind.topics`)."""
    return [t for k in load_kinds(settings.kinds) for t in k.topics(settings.of(k))]


def named(settings: Settings, tag: str) -> Settings:
    """A copy whose database, topics and group carry ``tag``: runs that share servers stay apart."""
    out = settings.with_(
        db=f"preagg_{tag}".replace("-", "_"),
        deadletter_topic=f"deadletter-{tag}",
        group_id=f"preagg-{tag}",
    )
    for kind in load_kinds(settings.kinds):
        s = settings.of(kind)
        named_apart = {name: f"{getattr(s, name)}-{tag}" for name in kind.topic_settings}
        out = out.with_stream(kind, topic=f"{kind.name}-{tag}", **named_apart)
    return out


__all__ = [
    "REGISTRY",
    "Kind",
    "Stream",
    "StreamContext",
    "kind_in",
    "kind_named",
    "load_kinds",
    "named",
    "stream_topics",
    "unknown_variables",
    "written_topics",
]
