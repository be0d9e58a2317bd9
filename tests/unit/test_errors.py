"""Every error preagg raises on purpose has one base and an exit status."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from pipeline.core.errors import EXIT_BUSY, EXIT_FAILED, EXIT_FENCED, EXIT_USAGE, PreaggError

ROOT = Path(__file__).resolve().parents[2] / "pipeline"
#: Driver errors of our own making: they subclass PyMongo's so that the store's retry rules apply.
DRIVER_ERRORS = {"StoreUnreachable", "DuplicateKeyUnresolved", "NotDurable"}


def exception_classes() -> list[tuple[str, str]]:
    """(module, class) of every class in the package whose bases name an Error or Exception."""
    out = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if any(
                    b.endswith(("Error", "Exception", "Conflict", "Held", "Failed", "NotSetUp"))
                    for b in bases
                ):
                    out.append((module, node.name))
    return out


def test_every_error_of_ours_has_the_one_base() -> None:
    found = exception_classes()
    assert len(found) > 15
    strays = []
    for module, name in found:
        cls = getattr(importlib.import_module(module), name)
        if name not in DRIVER_ERRORS and not issubclass(cls, PreaggError):
            strays.append(f"{module}.{name}")
    assert not strays, strays


def test_each_family_exits_as_documented() -> None:
    from pipeline.core.commit import FenceConflict
    from pipeline.core.parse import UsageError
    from pipeline.ops.lease import LeaseHeld
    from pipeline.ops.replay_recovery import ReadBackFailed
    from pipeline.settings import SettingsError

    assert UsageError.exit_code == SettingsError.exit_code == EXIT_USAGE == 2
    assert LeaseHeld.exit_code == EXIT_BUSY == 3
    assert FenceConflict.exit_code == EXIT_FENCED == 75
    assert ReadBackFailed.exit_code == EXIT_FAILED == 1
    assert issubclass(UsageError, ValueError)  # callers that catch ValueError still do


def test_help_is_plain_text() -> None:
    """``preagg --help`` showed reStructuredText and an internal path."""
    import argparse

    from pipeline.cli import build_parser

    def helps(parser: argparse.ArgumentParser) -> list[str]:
        out = [parser.format_help()]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    out += helps(sub)
        return out

    texts = helps(build_parser())
    assert len(texts) > 20
    for text in texts:
        assert "``" not in text and ":func:" not in text and ":class:" not in text, text[:300]
        assert "pipeline/" not in text, text[:300]
