"""docs/analysts.md run as an analyst would: its shell lines, then each mongosh block, each
answer compared with ``preagg query``'s on the same data.

Twice: on the README's access log (generated at its ``../shared/data`` path, UTC), and on a
generated month of Zipf traffic for a site in Europe/Berlin (a 25-hour day included), the
blocks' first lines pointed at it. The blocks run in the real MongoDB shell (``make mongosh``).
"""

from __future__ import annotations

import itertools
import json
import random
import re
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pipeline.ops.shell import NoShell, find_mongosh
from tests.integration.helpers import schema_violations
from tests.integration.walk import Walk, js_blocks, steps, walking

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "analysts.md"
CONCRETE = {"preagg services up && preagg worker &": ["preagg services up", "preagg worker &"]}
ZONED = "shop.example"
#: The README's values in the blocks' first lines → the zoned site's.
ZONED_VALUES = {
    "semicomplete.com": ZONED,
    "2015-04-21": "2026-10-10",
    "2015-05-20": "2026-11-08",
    "2015-05-19": "2026-10-25",  # a 25-hour local day (the clocks go back)
    "2015-05": "2026-10",
    "2015-05-04": "2026-10-05",
    "2015-05-24": "2026-11-08",
    "2015-05-17": "2026-10-20",
}


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walk]:
    try:
        find_mongosh()
    except NoShell as exc:  # `make test` installs it; without it the cookbook is untested: a failure
        pytest.fail(f"the cookbook runs in the real MongoDB shell: {exc}")
    with walking(tmp_path) as w:
        yield w


def zoned_traffic(path: Path) -> int:
    """A month of hits of ``ZONED``: Zipf pages ("/" the busiest), 500 visitors, a tenth crawlers."""
    rng = random.Random(7)
    pages = ["/"] + [f"/p/{i}" for i in range(1, 300)]
    weights = [1 / (i + 1) for i in range(len(pages))]
    start = datetime(2026, 10, 5, tzinfo=UTC)
    lines = []
    for _ in range(6000):
        ts = start + timedelta(seconds=rng.randrange(35 * 86400))
        page = rng.choices(pages, weights)[0]
        hit: dict[str, Any] = {"site": ZONED, "page": page, "ts": ts.isoformat()}
        if rng.random() < 0.1:
            hit["props"] = {"agent": "Bot"}
        else:
            hit["visitor"] = f"v{rng.randrange(500)}"
            hit["props"] = {"agent": "Firefox"}
        lines.append(json.dumps(hit))
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def first_line(block: str, values: dict[str, str]) -> str:
    """The block with its first line's quoted values replaced."""
    head, _, rest = block.partition("\n")
    for old, new in values.items():
        head = head.replace(f'"{old}"', f'"{new}"')
    return f"{head}\n{rest}"


def consts(block: str) -> dict[str, str]:
    """The ``const a = "x", b = "y"`` of a block's first line."""
    return dict(re.findall(r'(\w+) = "([^"]*)"', block.partition("\n")[0]))


def shell(walk: Walk, block: str) -> Any:
    return json.loads(walk.run(f"preagg mongosh --quiet --json=relaxed --eval {shlex.quote(block)}"))


def cli(walk: Walk, line: str) -> Any:
    return json.loads(walk.run(f"preagg query {line} --json"))


def days_of(walk: Walk, c: dict[str, str], extra: str = "") -> dict[str, int]:
    rows = cli(walk, f"hits --site {c['site']} --from {c['from']} --to {c['to']} --by day{extra}")
    return {r["t"][:10]: r["hits"] for r in rows if r["hits"]}


def check_30_days(walk: Walk, c: dict[str, str], got: Any) -> None:
    hits = days_of(walk, c)
    humans = days_of(walk, c, " --no-bots")
    seen = cli(walk, f"visitors --site {c['site']} --from {c['from']} --to {c['to']}")
    visitors = {r["t"][:10]: r["visitors"] for r in seen if r["hits"]}
    assert [r["date"] for r in got] == sorted(hits)
    assert {r["date"]: r["hits"] for r in got} == hits
    assert {r["date"]: r["visitors"] for r in got} == visitors
    assert {r["date"]: r["bot_hits"] for r in got} == {d: n - humans.get(d, 0) for d, n in hits.items()}
    assert any(r["bot_hits"] for r in got) and any(r["visitors"] for r in got)


def check_hours(walk: Walk, c: dict[str, str], got: Any) -> None:
    rows = cli(
        walk,
        f"hits --site {c['site']} --page {c['page']} --from {c['day']} --to {c['day']}T23:59 --by hour",
    )
    assert got["hours"] == [r["hits"] for r in rows]
    assert got["hits"] == sum(got["hours"]) > 0


def check_top(walk: Walk, c: dict[str, str], got: Any) -> None:
    first = date.fromisoformat(f"{c['month']}-01")
    last = (first + timedelta(days=32)).replace(day=1) - timedelta(days=1)
    rows = cli(walk, f"pages --site {c['site']} --from {first} --to {last} --limit 10")
    assert [(r["page"], r["hits"]) for r in got] == [(r["page"], r["hits"]) for r in rows]
    assert all(r["exact"] for r in got) and len(got) == 10


def check_weeks(walk: Walk, c: dict[str, str], got: Any) -> None:
    weeks: Counter[str] = Counter()
    for day, n in days_of(walk, c).items():
        year, week, _ = date.fromisoformat(day).isocalendar()
        weeks[f"{year}-W{week:02d}"] += n
    assert [(r["week"], r["hits"]) for r in got] == sorted(weeks.items())
    for before, row in itertools.pairwise(got):
        assert row["change_pct"] == pytest.approx((row["hits"] / before["hits"] - 1) * 100, abs=0.051)


def check_visitors(walk: Walk, c: dict[str, str], got: Any) -> None:
    rows = cli(walk, f"visitors --site {c['site']} --from {c['from']} --to {c['to']}")
    want = [(r["t"][:10], r["visitors"], r["exact"]) for r in rows if r["hits"]]
    assert [(r["date"], r["visitors"], r["visitors_exact"]) for r in got] == want
    assert all(v for _, v, _ in want)


def check_bots(walk: Walk, c: dict[str, str], got: Any) -> None:
    hits, humans = days_of(walk, c), days_of(walk, c, " --no-bots")
    assert {r["date"]: r["hits"] - r["bot_hits"] for r in got} == {d: humans.get(d, 0) for d in hits}
    assert all(r["bot_share"] == pytest.approx(r["bot_hits"] / r["hits"], abs=0.0006) for r in got)
    assert any(r["bot_share"] for r in got)


#: The cookbook's blocks, in order, and what each must agree with.
CHECKS: list[Callable[[Walk, dict[str, str], Any], None]] = [
    check_30_days,
    check_hours,
    check_top,
    check_weeks,
    check_visitors,
    check_bots,
]


def test_the_cookbook_answers_as_preagg_query(walk: Walk) -> None:
    text = DOC.read_text()
    for line, run in steps(text, CONCRETE):
        if line == "python":
            (walk.work / "example.py").write_text(run)
            out = walk.run(f"{sys.executable} example.py")
            assert re.search(r"^2015-05-1\d \d+$", out, re.M), out
            continue
        out = walk.do(run)
        if "getCollectionInfos" in run:
            assert "hits_site_days" in out and "top_pages_months" in out
    blocks = js_blocks(text)
    assert len(blocks) == len(CHECKS), "a cookbook block without its check (or a check without its block)"
    for block, check in zip(blocks, CHECKS, strict=True):
        check(walk, consts(block), shell(walk, block))

    assert not schema_violations(walk.settings())  # documents and views' rows as schemas/ declares

    # The same blocks on a zoned site's generated month
    walk.do(f"preagg sites set-zone {ZONED} Europe/Berlin")
    zoned_traffic(walk.work / "zoned.jsonl")
    walk.do("preagg produce hits zoned.jsonl")
    for block, check in zip(blocks, CHECKS, strict=True):
        moved = first_line(block, ZONED_VALUES)
        got = shell(walk, moved)
        check(walk, consts(moved), got)
        if check is check_hours:
            assert len(got["hours"]) == 25  # 2026-10-25 in Berlin
