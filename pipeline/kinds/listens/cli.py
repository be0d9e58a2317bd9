"""``preagg query top-tags`` and ``preagg query heard``."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pipeline.core.parse import parse_id
from pipeline.core.text import print_rows
from pipeline.kinds.listens.settings import KEY
from pipeline.services.urls import command_settings
from pipeline.store.command import on_db

if TYPE_CHECKING:
    from pipeline.store.client import Db


def cmd_query_listens(args: argparse.Namespace) -> int:
    """A user's top tags by distinct songs, or whether a user heard a song under a tag."""
    from pipeline.kinds.listens.query import TOP_TAGS_HEADER, heard, latest_day, shown_top_tags, top_tags

    s = command_settings()
    ls = s.of(KEY)
    spec = ls.heard()

    async def run(db: Db) -> Any:
        if args.what == "heard":
            return await heard(
                db, parse_id(args.user), parse_id(args.tag), parse_id(args.song), spec, s.schema
            )
        today = datetime.fromisoformat(args.today).date() if args.today else None
        ranked = await top_tags(db, parse_id(args.user), args.days, args.limit, today, s.schema)
        if not ranked and not args.json:
            latest = await latest_day(db, parse_id(args.user), s.schema)
            upto = today or datetime.now(UTC).date()
            said = (
                f"latest listens are of {latest} (--today {latest})" if latest else "the user has no listens"
            )
            print(
                f"no listens of user {args.user} in the {args.days} days up to {upto}; {said}",
                file=sys.stderr,
            )
        return ranked

    result = on_db(s, run)
    if args.what == "heard":
        print("yes" if result else "no")
        return 0
    print_rows(shown_top_tags(result), args.json, TOP_TAGS_HEADER)
    return 0


def add_queries(qsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The listens kind's ``preagg query`` subcommands."""
    qt = qsub.add_parser("top-tags", help="a user's tags by estimated distinct songs over the last N days")
    qt.add_argument("--user", required=True)
    qt.add_argument("--days", type=int, default=7, choices=range(1, 8), metavar="N (1-7)")
    qt.add_argument("--limit", type=int, default=10)
    qt.add_argument("--today", help="the last day of the window (YYYY-MM-DD, default: today UTC)")
    qt.add_argument("--json", action="store_true")
    qt.set_defaults(func=cmd_query_listens)
    qd = qsub.add_parser("heard", help="has this user heard this song under this tag (Bloom filter)")
    qd.add_argument("--user", required=True)
    qd.add_argument("--tag", required=True)
    qd.add_argument("--song", required=True)
    qd.set_defaults(func=cmd_query_listens)
