"""``preagg query top-tags`` and ``preagg query heard``, made from their declarations (queries.py)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeline.core.cli_params import QueryCommand
from pipeline.core.text import print_rows
from pipeline.kinds.listens.queries import QUERIES
from pipeline.kinds.listens.settings import KEY
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.store.client import Db


def cmd_query_top_tags(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """A user's top tags by distinct songs over the last N days."""
    from pipeline.kinds.listens.query import TOP_TAGS_HEADER, latest_day, shown_top_tags, top_tags

    s = command_settings()

    async def run(db: Db) -> Any:
        ranked = await top_tags(db, a["user"], a["days"], a["limit"], a["today"], s.schema)
        if not ranked and not args.json:
            latest = await latest_day(db, a["user"], s.schema)
            upto = a["today"] or datetime.now(UTC).date()
            said = (
                f"latest listens are of {latest} (--today {latest})" if latest else "the user has no listens"
            )
            print(
                f"no listens of user {a['user']} in the {a['days']} days up to {upto}; {said}",
                file=sys.stderr,
            )
        return ranked

    print_rows(shown_top_tags(on_db(s, run)), args.json, TOP_TAGS_HEADER)
    return 0


def cmd_query_heard(a: Mapping[str, Any], args: argparse.Namespace) -> int:
    """Whether a user heard a song under a tag."""
    from pipeline.kinds.listens.query import heard

    s = command_settings()
    spec = s.of(KEY).heard()

    async def run(db: Db) -> bool:
        return await heard(db, a["user"], a["tag"], a["song"], spec, s.schema)

    result = on_db(s, run)
    print(json.dumps({"heard": result}) if args.json else ("yes" if result else "no"))
    return 0


def query_commands() -> tuple[QueryCommand, ...]:
    """The listens kind's ``preagg query`` subcommands."""
    return (
        QueryCommand(QUERIES["top-tags"], cmd_query_top_tags),
        QueryCommand(QUERIES["heard"], cmd_query_heard),
    )
