"""One declaration per query: ``preagg query <command>`` and ``GET <path>`` take the same parameters (pure).

A kind declares each of its queries once (``pipeline/kinds/<kind>/queries.py``): the command
name, the endpoint, the parameters (:class:`~pipeline.core.params.Param`), the rules between
them and the limits a client should know. The kind's ``api.py`` makes the HTTP route of it
(:meth:`Query.route`); its ``cli.py`` makes the command line of it
(:func:`pipeline.core.cli_params.add_command`), with the same options, help, defaults and
bounds, parsed by the same rules. The OpenAPI document publishes the limits
(``x-preagg-limits``), which the dashboard reads instead of keeping a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.params import Param
from pipeline.core.routes import Handler, Route


@dataclass(frozen=True)
class Query:
    """One query of a kind, as the CLI and the API both take it."""

    #: ``preagg query <command>``.
    command: str
    #: ``GET <path>``.
    path: str
    summary: str
    params: tuple[Param, ...]
    #: Rules between parameters (a range's end after its start...): raise ``BadParam``.
    check: Callable[[Mapping[str, Any]], None] | None = None
    #: Bounds a client should know beyond each parameter's own (a range's longest span in
    #: days, per bucket size...): published in OpenAPI as ``x-preagg-limits``.
    limits: Mapping[str, Any] = field(default_factory=dict)

    def route(self, handler: Handler, returns: Mapping[str, Any], tag: str) -> Route:
        """The HTTP endpoint of this query."""
        return Route(
            self.path, self.summary, self.params, handler, returns, self.check, tag, limits=self.limits
        )


def indexed(*queries: Query) -> dict[str, Query]:
    """A kind's queries by command name."""
    return {q.command: q for q in queries}
