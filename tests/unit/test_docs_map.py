"""docs/design.md's module map is the tree: every module listed, with what its docstring says."""

from __future__ import annotations

from pathlib import Path

from pipeline.docs_map import block, modules

DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"


def test_the_map_in_the_design_document_is_the_tree() -> None:
    assert block() in DESIGN.read_text(), "docs/design.md's module map is stale: run `make docs-map`"


def test_every_module_says_what_it_is_for() -> None:
    silent = [rel for rel, said in modules() if not said]
    assert not silent, f"modules without a docstring: {silent}"
