"""The hits kind's HTTP endpoints: hit series, top pages, custom properties, visitors, sites.

Each route answers with the function ``answers.py`` declares for its query, the one
``preagg query`` calls too, and returns that answer's JSON rows; here are only their
schemas for the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from pipeline.core.routes import Route, rows_of
from pipeline.kinds.hits import answers, grafana
from pipeline.kinds.hits.queries import QUERIES
from pipeline.settings import Settings

COUNT = {"type": "integer", "minimum": 0}
TIME = {"type": "string", "format": "date-time"}


class Answer(Protocol):
    def json(self) -> list[dict[str, Any]]: ...


def _with_pruned(schema: dict[str, Any]) -> dict[str, Any]:
    """``/api/hits`` rows may carry ``pruned`` (a bucket past the site's retention)."""
    schema["items"]["properties"]["pruned"] = {
        "type": "boolean",
        "description": "true: the minute (hourly) counters of this bucket's day were pruned "
        "(past the site's retention); its count is not the day's traffic",
    }
    return schema


def _with_visitors(schema: dict[str, Any]) -> dict[str, Any]:
    """``/api/pages?metric=visitors`` rows carry each page's unique visitors too."""
    props = schema["items"]["properties"]
    props["visitors"] = {"type": "integer", "minimum": 0, "description": "metric=visitors: unique visitors"}
    props["visitors_exact"] = {"type": "boolean", "description": "false: visitors is an estimate"}
    return schema


#: Each query's answer and the JSON Schema of its rows.
RETURNS: dict[str, tuple[Callable[..., Awaitable[Answer]], dict[str, Any]]] = {
    "hits": (answers.hits, _with_pruned(rows_of(("t", TIME), ("hits", COUNT)))),
    "pages": (answers.pages, _with_visitors(rows_of(("page", {"type": "string"}), ("hits", COUNT)))),
    "props": (
        answers.props,
        rows_of(("name", {"type": "string"}), ("value", {"type": "string"}), ("count", COUNT)),
    ),
    "visitors": (
        answers.visitors,
        rows_of(
            ("t", TIME),
            ("visitors", COUNT),
            (
                "exact",
                {"type": "boolean", "description": "false: a HyperLogLog estimate (0.81% standard error)"},
            ),
            ("hits", COUNT),
            (
                "sum_of_days",
                {
                    "type": "boolean",
                    "description": "true: a bucket of several days with the daily salt, whose figure "
                    "is the sum of its days' visitors (a person counts once a day)",
                },
            ),
        ),
    ),
    "visits": (
        answers.visits,
        rows_of(
            ("t", {"type": "string", "format": "date", "description": "the bucket's first local day"}),
            ("visits", COUNT),
            ("bounces", {**COUNT, "description": "visits of one page view"}),
            ("bounce_rate", {"type": ["number", "null"], "description": "bounces / visits"}),
            ("views", {**COUNT, "description": "page views in these visits"}),
            ("views_per_visit", {"type": ["number", "null"]}),
            (
                "visit_duration",
                {"type": ["number", "null"], "description": "mean seconds, first to last hit"},
            ),
            (
                "median_duration_at_most",
                {
                    "type": ["number", "null"],
                    "description": "the upper bound of the histogram bucket holding the median visit "
                    "(seconds; null: no visit, or past the last bound)",
                },
            ),
            (
                "complete",
                {
                    "type": "boolean",
                    "description": "false: visits of these days may still close and count (a visit "
                    "counts once a timeout passed its last hit)",
                },
            ),
        ),
    ),
    "visit-pages": (
        answers.visit_pages_answer,
        rows_of(
            ("page", {"type": "string"}),
            ("entries", {**COUNT, "description": "closed visits whose first hit was on the page"}),
            ("exits", {**COUNT, "description": "closed visits whose last hit was on the page"}),
        ),
    ),
    "sites": (
        answers.sites,
        rows_of(
            ("site", {"type": "string"}),
            ("zone", {"type": "string"}),
            ("first_month", {"type": ["string", "null"], "description": "YYYY-MM"}),
            ("last_month", {"type": ["string", "null"], "description": "YYYY-MM"}),
        ),
    ),
}


def routes(settings: Settings) -> list[Route]:
    """The hits endpoints, reading documents in the deployment's schema."""
    reading = answers.Reading.of(settings)

    def handler(
        answer: Callable[..., Awaitable[Answer]],
    ) -> Callable[[Any, Mapping[str, Any]], Awaitable[Any]]:
        async def handle(db: Any, a: Mapping[str, Any]) -> Any:
            return (await answer(db, a, reading)).json()

        return handle

    return [
        *(QUERIES[name].route(handler(answer), schema, "hits") for name, (answer, schema) in RETURNS.items()),
        *grafana.routes(settings),
    ]
