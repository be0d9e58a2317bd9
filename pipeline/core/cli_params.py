"""A query's command line made from its declaration (pure; argparse only).

Each :class:`~pipeline.core.params.Param` becomes ``--name`` with the parameter's help, its
default and bounds said in the help; the values are parsed by :meth:`Param.parse`, the rules
the HTTP API applies, so a value the API refuses is refused here too, as a one-line usage
error naming the option.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.core.params import BadParam, Param
from pipeline.core.parse import UsageError
from pipeline.core.queries import Query
from pipeline.core.routes import WAITING

#: What a command does with its parsed values and the output options (``--json``...): an exit status.
Run = Callable[[Mapping[str, Any], argparse.Namespace], int]

_METAVAR = {
    "time": "TIME",
    "end": "TIME",
    "date": "DAY",
    "id": "ID",
    "integer": "N",
    "string": "TEXT",
}


def option(name: str) -> str:
    """The command-line option of a parameter: ``--name``."""
    return "--" + name.replace("_", "-")


def _dest(p: Param) -> str:
    return "param_" + p.name


def describe(p: Param) -> str:
    """A parameter's help as the command line shows it: its text, bounds and default."""
    text = p.help.replace("`", "")
    if p.minimum is not None and p.maximum is not None:
        text += f"; {p.minimum} to {p.maximum}"
    if p.default is not None and p.type != "boolean":
        text += f" (default: {p.default})"
    return text


def add_params(parser: argparse.ArgumentParser, params: Sequence[Param]) -> None:
    """``--name`` for each parameter."""
    for p in params:
        if p.flag is not None:
            spelling, value = p.flag
            parser.add_argument(
                spelling, dest=_dest(p), action="store_const", const=value, help=p.help.replace("`", "")
            )
        elif p.type == "boolean":
            parser.add_argument(
                option(p.name), dest=_dest(p), action="store_const", const="true", help=describe(p)
            )
        elif p.type == "choice":
            parser.add_argument(option(p.name), dest=_dest(p), choices=p.choices, help=describe(p))
        else:
            parser.add_argument(
                option(p.name),
                dest=_dest(p),
                required=p.required,
                metavar=_METAVAR.get(p.type, "VALUE"),
                help=describe(p),
            )


def values(query: Query, args: argparse.Namespace, now: datetime | None = None) -> dict[str, Any]:
    """The parameters' values from parsed arguments, by the API's rules; a refusal names its option."""
    now = now or datetime.now(UTC)
    try:
        out = {p.name: p.parse(getattr(args, _dest(p)), now) for p in query.params}
        if query.check is not None:
            query.check(out)
    except BadParam as exc:
        named = next((p.flag[0] for p in query.params if p.name == exc.name and p.flag), option(exc.name))
        raise UsageError(f"{named}: {exc.message}") from None
    return out


@dataclass(frozen=True)
class QueryCommand:
    """A kind's ``preagg query <command>``: its declaration and what runs it (``Kind.query_commands``)."""

    query: Query
    run: Run
    #: Output options beside the table: ``json``, ``csv``, ``plot``.
    outputs: Sequence[str] = ("json",)


class Commands:
    """Where a kind adds its own ``preagg`` commands (``Kind.add_commands``).

    It hides argparse's private subparsers type from the kinds' interface: a kind asks for a
    parser by name and help, and fills it in with argparse's public methods.
    """

    def __init__(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        self._sub = sub

    def add(self, name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        """A new ``preagg <name>`` command's parser."""
        return self._sub.add_parser(name, help=help, description=description or help)


def add_command(commands: Commands, qc: QueryCommand) -> argparse.ArgumentParser:
    """``preagg query <command>`` of a declared query: its parameters as options, then the output options."""
    query, run = qc.query, qc.run
    parser = commands.add(query.command, query.summary.replace("`", ""), query.summary)
    add_params(parser, query.params)
    if qc.outputs:
        fmt = parser.add_mutually_exclusive_group()
        for name in qc.outputs:
            if name == "plot":
                parser.add_argument("--plot", metavar="FILE.png", help="also draw the series into a PNG file")
            else:
                fmt.add_argument(
                    option(name), action="store_true", help=f"print {name.upper()} instead of a table"
                )
    # WAITING: what the command line saw waiting to be counted before the query (-1: unknown)
    parser.set_defaults(
        func=lambda args: run({**values(query, args), WAITING: getattr(args, "waiting", -1)}, args),
        query=query,
    )
    return parser


def declared_options(parser: argparse.ArgumentParser) -> set[str]:
    """The parameter options a command takes (the output options left out), for the parity test."""
    return {a.dest.removeprefix("param_") for a in parser._actions if a.dest.startswith("param_")}
