"""The layout's rules, checked on import statements: pure layers stay pure, kinds stay in their folders."""

from __future__ import annotations

import ast
from pathlib import Path

import pipeline
from pipeline.kinds import REGISTRY

ROOT = Path(pipeline.__file__).parent
#: Modules that import these do I/O (or need a server's client to be imported).
IO = ("pymongo", "motor", "aiokafka", "faust", "prometheus_client", "pipeline.store", "pipeline.worker")
PURE = [
    *sorted((ROOT / "core").glob("*.py")),
    *(
        ROOT / "kinds" / kind / f"{part}.py"
        for kind in REGISTRY
        for part in ("decode", "aggregate", "layout", "settings")
    ),
]


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_pure_layers_import_no_io() -> None:
    for path in PURE:
        assert path.exists(), path
        bad = {m for m in imports(path) if m.startswith(IO)}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_library_code_never_imports_the_demo_or_the_benchmarks() -> None:
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).parts
        if rel[0] in ("demo", "bench") or rel == ("cli.py",):
            continue
        bad = {m for m in imports(path) if m.startswith(("pipeline.demo", "benchmarks"))}
        assert not bad, f"{'/'.join(rel)} imports {bad}"


def test_a_kind_imports_no_other_kind_and_shared_code_imports_kinds_only_through_the_registry() -> None:
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).parts
        mods = {m for m in imports(path) if m.startswith("pipeline.kinds.")}
        if rel[0] == "kinds" and len(rel) > 2:
            others = {m for m in mods if m.split(".")[2] not in (rel[1], "kind")}
            assert not others, f"{'/'.join(rel)} imports another kind: {others}"
        elif rel[0] not in ("kinds", "demo", "bench", "ops") and rel != ("__init__.py",):
            assert not mods, f"{'/'.join(rel)} imports a kind directly: {mods}"


def test_importing_a_pure_module_loads_no_client_library() -> None:
    """``pipeline/__init__`` loads its public names lazily: a pure module pays for none of them."""
    import subprocess
    import sys

    probe = (
        "import sys, pipeline.settings, pipeline.core.times; "
        "print(sorted(m for m in ('aiokafka', 'pymongo', 'faust', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    use = "from pipeline import EventProducer, Settings, hit_key, hits_series; print(Settings.__name__)"
    assert (
        subprocess.run([sys.executable, "-c", use], capture_output=True, text=True, check=True).stdout
        == "Settings\n"
    )
