"""Every ``sh`` block of docs/ runs: each document in a fresh directory with its services.

A document's block is reference rather than a story, so each gets what it assumes
first (:data:`GIVEN`: services, a worker with the settings it discusses, its input
files), and its lines with alternatives run in each form (:data:`CONCRETE`). Every
line must exit 0 and print something; a line with placeholders the walk does not
know fails the test, so a new line in docs/ gets run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.walk import PLACEHOLDER, Walk, free_port, steps, walking

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs"
LATE = '{"site": "shop.example", "page": "/late", "ts": "2026-10-25T12:00:00Z"}'
PROPS_RUN = (
    "preagg query props --site semicomplete.com --from 2015-05-17 --to 2015-05-20 "
    "--page / --name agent --json"
)
NOV = int(datetime(2026, 11, 20, 12, tzinfo=UTC).timestamp())

#: What each document assumes before its block.
GIVEN: dict[str, list[str]] = {
    "calendar.md": [
        "preagg services up",
        "PREAGG_HITS_LATENESS=172800 preagg worker &",
        f"echo '{LATE}' | preagg produce hits -",
    ],
    "dashboard.md": [],  # its block starts the services and a worker
    "impressions-relations.md": [
        "preagg services up",
        "preagg worker &",
        """echo '{"user": 7, "item": "d-19", "ts": 1700000000}' > events.jsonl""",
    ],
    "ingest.md": [
        "preagg services up",
        "PREAGG_HITS_FORMAT=auto PREAGG_HITS_SITE=web.example preagg worker &",
        "cp ../shared/data/access-logs/apache_logs access.log",
        """echo '{"site": "web.example", "page": "/", "ts": 1700000000}' > events.jsonl""",
    ],
    "listens.md": [
        "preagg services up",
        "preagg worker &",
        "printf '%s\\n' "
        + " ".join(f"""'{{"user": 1, "tag": 5, "song": {s}, "ts": {NOV}}}'""" for s in (9, 10, 11))
        + " > listens.jsonl",
    ],
    "name-store.md": [
        "preagg services up",
        "preagg worker &",
        "preagg produce hits ../shared/data/access-logs/apache_logs --format clf "
        "--site semicomplete.com --props",
    ],
    "visitors.md": ["preagg services up", "preagg worker &"],
    "visits.md": [
        "preagg services up",
        "PREAGG_HITS_VISITS=true PREAGG_HITS_VISIT_GRACE=0 preagg worker &",
    ],
}
#: Lines run elsewhere.
ELSEWHERE = {
    "rollups.md": "tests/integration/test_rollups.py runs its block on its data",
    "analysts.md": "tests/integration/test_analysts.py runs its lines and mongosh blocks, checked",
    "make dashboard": "test_readme_walk.test_make_dashboard_serves_its_url",
    "deployment.md": "tests/unit/test_deploy.py renders its kustomize lines and checks each kubectl "
    "line against the manifests (there is no cluster here to apply them to)",
}
#: How a line with alternatives or placeholders runs.
CONCRETE: dict[str, list[str]] = {
    "preagg retention run [--dry-run]": ["preagg retention run --dry-run", "preagg retention run"],
    "preagg deadletters replay --reason late [--since now-2d] [--topic hits]": [
        "preagg deadletters replay --reason late --since now-2d --topic hits"
    ],
    "preagg services up && preagg worker &": ["preagg services up", "preagg worker &"],
    "preagg serve [--port 8900] [--bind 127.0.0.1]": ["preagg serve --port {port} --bind 127.0.0.1 &"],
    "preagg query impressions --top 10 [--day 2023-11-14]": [
        "preagg query impressions --top 10 --day 2023-11-14"
    ],
    "preagg produce hits access.log --as vector | fluentbit | line": [
        "preagg produce hits access.log --as vector",
        "preagg produce hits access.log --as fluentbit",
        "preagg produce hits access.log --as line",
    ],
    "preagg produce listens FILE... [--format jsonl|lastfm]": [
        "preagg produce listens listens.jsonl --format jsonl"
    ],
    "preagg query top-tags --user U --days N [--limit 10] [--today YYYY-MM-DD]": [
        "preagg query top-tags --user 1 --days 7 --limit 10 --today 2026-11-20"
    ],
    "preagg query heard --user U --tag T --song S": ["preagg query heard --user 1 --tag 5 --song 9"],
    "preagg query props --site S --from 2015-05-17 --to 2015-05-20 [--page P] [--name agent] [--json]": [
        PROPS_RUN
    ],
}
#: Answers known exactly: (document, line run) → a check of its output.
CHECKS: dict[tuple[str, str], Callable[[str], bool]] = {
    ("calendar.md", "preagg deadletters show --reason late"): lambda out: "read 1 dead letters" in out,
    ("impressions-relations.md", "preagg query impressions --user 7"): lambda out: "d-19" in out,
    ("impressions-relations.md", "preagg query impressions --top 10 --day 2023-11-14"): lambda out: (
        "d-19" in out
    ),
    ("listens.md", "preagg query top-tags --user 1 --days 7 --limit 10 --today 2026-11-20"): (
        lambda out: "5" in out.split() and "3" in out.split()  # an exact count, not 3.0
    ),
    ("listens.md", "preagg query heard --user 1 --tag 5 --song 9"): lambda out: out.strip() == "yes",
    ("name-store.md", PROPS_RUN): lambda out: sum(r["count"] for r in json.loads(out)) == 400,
    ("visitors.md", "preagg query visitors --site blog.example --from 2025-11-24 --to 2025-11-24"): (
        lambda out: out.split("\n")[1].split() == ["2025-11-24T00:00:00", "3", "4", "yes"]
    ),
    (
        "visitors.md",
        "preagg query visitors --site blog.example --page / --from 2025-11-24 --to 2025-11-24 "
        "--by hour --json",
    ): lambda out: [(r["visitors"], r["hits"]) for r in json.loads(out) if r["hits"]] == [(2, 3)],
    ("visits.md", "preagg query visits --site shop.example --from 2026-11-20 --to 2026-11-20"): (
        lambda out: (
            out.split("\n")[1].split() == ["2026-11-20", "2", "1", "0.5", "4", "2.0", "300.0", "0.0", "yes"]
        )
    ),
    (
        "visits.md",
        "preagg query visits --site shop.example --from 2026-11-20 --to 2026-11-21 --by total --json",
    ): lambda out: (
        [(r["visits"], r["bounces"], r["views"], r["complete"]) for r in json.loads(out)]
        == [(2, 1, 4, False)]
    ),
    (
        "visits.md",
        "preagg query visit-pages --site shop.example --from 2026-11-20 --to 2026-11-20 --order exits",
    ): lambda out: (
        [line.split() for line in out.splitlines()[1:]] == [["/", "2", "1"], ["/signup", "0", "1"]]
    ),
}


def documents() -> list[str]:
    return sorted(p.name for p in DOCS.glob("*.md") if "```sh" in p.read_text())


@pytest.fixture
def walk(tmp_path: Path) -> Iterator[Walk]:
    with walking(tmp_path) as w:
        yield w


def test_every_document_with_commands_is_walked() -> None:
    assert set(documents()) <= set(GIVEN) | set(ELSEWHERE), (
        "a new document with commands: say what it assumes"
    )


@pytest.mark.parametrize("doc", [d for d in documents() if d not in ELSEWHERE])
def test_the_document_block_runs(doc: str, walk: Walk) -> None:
    text = (DOCS / doc).read_text()
    unknown = [
        line
        for line, run in steps(text, CONCRETE)
        if line not in (*ELSEWHERE, *CONCRETE) and PLACEHOLDER.search(run)
    ]
    assert not unknown, f"{doc}: lines with placeholders the walk cannot run: {unknown}"
    port = free_port()
    for line in GIVEN[doc]:
        walk.do(line)
    checked = 0
    for line, step in steps(text, CONCRETE):
        if line in ELSEWHERE:
            continue
        run = step.replace("{port}", str(port))
        out = walk.do(run)
        if "preagg serve" in run:
            walk.wait_http(f"http://127.0.0.1:{port}/health")
        check = CHECKS.get((doc, step))
        if check is not None:
            assert check(out), (run, out)
            checked += 1
    assert checked == sum(1 for d, _ in CHECKS if d == doc), "a checked line left the document"
    if doc == "ingest.md":  # every envelope was read: nothing dead-lettered
        assert "dead letters: 0 counted" in walk.do("preagg status")
