"""One declaration per query: every query has its CLI command and its endpoint,
with the same parameters; the limits a client needs are in the OpenAPI document."""

from __future__ import annotations

import argparse
import importlib

import pytest

from pipeline.cli import build_parser
from pipeline.core.cli_params import declared_options
from pipeline.core.parse import UsageError
from pipeline.kinds import kind_named
from pipeline.serve.openapi import openapi_document
from pipeline.settings import BUILTIN_KINDS, Settings

KINDS = (*BUILTIN_KINDS, "tests.kinds.purchases:KIND")


def query_parsers() -> dict[str, argparse.ArgumentParser]:
    top = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    query = top.choices["query"]
    sub = next(a for a in query._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_query_has_its_command_and_its_endpoint_with_the_same_parameters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREAGG_KINDS", ",".join(KINDS))
    parsers = query_parsers()
    settings = Settings()
    found = [(kind, qc.query) for kind in map(kind_named, KINDS) for qc in kind.query_commands()]
    assert len(found) >= 8
    for kind, q in found:
        names = {p.name for p in q.params}
        assert declared_options(parsers[q.command]) == names, q.command
        routes = {r.path: r for r in kind.api_routes(settings)}
        route = routes[q.path]
        assert {p.name for p in route.params} == names and route.summary == q.summary


def test_every_declared_query_of_a_builtin_kind_is_offered() -> None:
    for name in BUILTIN_KINDS:
        declared = importlib.import_module(f"pipeline.kinds.{name}.queries").QUERIES
        offered = {qc.query.command for qc in kind_named(name).query_commands()}
        assert offered == set(declared), name


def test_the_command_line_refuses_what_the_api_refuses_naming_the_option() -> None:
    parser = build_parser()
    for argv, says in (
        (["query", "pages", "--site", "s", "--limit", "5000"], "--limit"),
        (["query", "hits", "--site", "s", "--from", "2000-01-01", "--to", "2030-01-01"], "--from: the range"),
        (["query", "impressions", "--user", "1", "--top", "3"], "give exactly one of user, item, top"),
        (["query", "top-tags", "--user", "1", "--days", "9"], "--days"),
    ):
        args = parser.parse_args(argv)
        with pytest.raises(UsageError, match=says.replace("(", r"\(")):
            args.func(args)


def test_the_limits_are_published_for_the_dashboard() -> None:
    routes = [r for name in BUILTIN_KINDS for r in kind_named(name).api_routes(Settings())]
    doc = openapi_document(routes, guarded=False, version="test")
    pages = doc["paths"]["/api/pages"]["get"]
    assert pages["x-preagg-limits"]["max_days"] == 366
    assert {p["name"]: p["schema"].get("maximum") for p in pages["parameters"]}["limit"] == 1000
    assert doc["paths"]["/api/props"]["get"]["x-preagg-limits"]["max_days"] == 93
    assert doc["paths"]["/api/hits"]["get"]["x-preagg-limits"]["max_days_by"]["day"] == 1100
