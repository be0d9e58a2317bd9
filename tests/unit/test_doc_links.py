"""Every link between the documents points at a file and a heading that exist (GitHub's anchors)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s#]*\.md)?(#[^)\s]+)?\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slug(m) for m in re.findall(r"^#+\s+(.+)$", text, re.M)}


def test_links_between_documents_resolve() -> None:
    broken = []
    for doc in DOCS:
        for target, anchor in LINK.findall(doc.read_text()):
            if not target and not anchor:
                continue
            path = (doc.parent / target).resolve() if target else doc
            if not path.exists():
                broken.append(f"{doc.name}: {target} does not exist")
            elif anchor and anchor[1:] not in anchors(path):
                broken.append(f"{doc.name}: {target}{anchor} names no heading")
    assert not broken, broken


def test_the_benchmarks_page_holds_current_results_only() -> None:
    """History (superseded figures, what was tried and dropped) lives in git, not on the page."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text()
    assert len(text.splitlines()) <= 500
    for stale in ("(was ", "Tried and dropped", "Rerun ", "before issue"):
        assert stale not in text, stale
