"""Every ``preagg`` command line in README.md and docs/ parses (examples that drift).

Running them needs data and services (tests/integration runs the README's Python and
docs/rollups.md's commands); this checks, without servers, that each command, option
and choice a document shows exists as written.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from pipeline.cli import parse

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def command_lines() -> list[tuple[str, str]]:
    """(document, line) of each ``preagg ...`` line of a ``sh`` block."""
    out = []
    for doc in DOCS:
        for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", doc.read_text(), re.S):
            for raw in block.splitlines():
                for part in re.sub(r"\s+#\s.*$", "", raw).split("&&"):
                    line = part.strip().rstrip("&").strip()
                    line = re.sub(r"^(\w+=\S*\s+)+", "", line)  # PREAGG_X=1 preagg ...
                    # placeholders (<file>, ..., YYYY-MM-DD, a lone N or U) are syntax, not values
                    placeholder = re.search(r"<|\.\.\.|\||YYYY|\s[A-Z]{1,2}(\s|\]|$)", line)
                    if line.startswith("preagg ") and not placeholder:
                        out.append((doc.name, line))
    return out


LINES = command_lines()


def test_the_documents_show_commands() -> None:
    assert len(LINES) > 20


@pytest.mark.parametrize(("doc", "line"), LINES, ids=[f"{d}:{i}" for i, (d, _) in enumerate(LINES)])
def test_each_documented_command_parses(doc: str, line: str) -> None:
    args = shlex.split(line.replace("[", "").replace("]", ""))[1:]
    try:
        parse(args)
    except SystemExit as exc:  # --help and --version exit 0 once they have printed
        if exc.code != 0:
            pytest.fail(f"{doc}: `{line}` does not parse (exit {exc.code})")
