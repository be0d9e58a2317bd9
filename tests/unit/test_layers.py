"""The layout's rules, read from every import statement (top level, inside functions, under TYPE_CHECKING).

Layers run one way (docs/design.md, "The layers"): a module imports its own layer or
lower ones, never a higher one; the three runtimes do not import one another; no set
of modules imports itself round a cycle; pure modules import no client library; a kind
imports no other kind; the worker reaches its store only through the commit port. There is
no list of exceptions.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pipeline
from pipeline.kinds import REGISTRY

ROOT = Path(pipeline.__file__).parent

#: Lowest first. A module belongs to the first layer one of whose prefixes it has.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("pipeline.core",)),
    ("settings", ("pipeline.settings",)),
    (
        "adapters",
        ("pipeline.store", "pipeline.kafka", "pipeline.services", "pipeline.files", "pipeline.child"),
    ),
    ("kinds", ("pipeline.kinds",)),
    ("runtimes", ("pipeline.worker", "pipeline.serve", "pipeline.ops")),
    ("entry points", ("pipeline.cli", "pipeline.demo", "pipeline.testing", "pipeline.__main__", "pipeline")),
]
RUNTIMES = LAYERS[4][1]

#: Modules that import these do I/O (or need a server's client to be imported).
IO = ("pymongo", "aiokafka", "faust", "aiohttp", "prometheus_client", "pipeline.store", "pipeline.worker")
PURE = [
    *sorted((ROOT / "core").glob("*.py")),
    *(
        ROOT / "kinds" / kind / f"{part}.py"
        for kind in REGISTRY
        for part in ("decode", "aggregate", "layout", "settings")
    ),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}


def resolve(name: str) -> str:
    """The module ``name`` is or is inside (``pipeline.kinds.hits.KIND`` → ``pipeline.kinds.hits``)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in the file (names: the module they come from)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            subs = {f"{node.module}.{a.name}" for a in node.names} & MODULES.keys()
            # ``from pkg import submodule`` names the submodule; any other name, the module.
            found.update(subs if len(subs) == len(node.names) else {node.module, *subs})
    return found


def graph() -> dict[str, set[str]]:
    """Module → the package modules it imports."""
    return {
        name: {resolve(m) for m in imports(path) if m.startswith("pipeline")} - {name}
        for name, path in MODULES.items()
    }


def layer(module: str) -> int:
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS (and to docs/design.md)")


def test_every_import_runs_down_the_layers() -> None:
    wrong = [
        f"{m} ({LAYERS[layer(m)][0]}) imports {t} ({LAYERS[layer(t)][0]})"
        for m, targets in graph().items()
        for t in targets
        if layer(t) > layer(m)
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_runtimes_do_not_import_one_another() -> None:
    def runtime(m: str) -> str | None:
        return next((r for r in RUNTIMES if m == r or m.startswith(r + ".")), None)

    wrong = [
        f"{m} imports {t}"
        for m, targets in graph().items()
        for t in targets
        if runtime(m) and runtime(t) and runtime(m) != runtime(t)
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_worker_speaks_to_its_store_only_through_the_commit_port() -> None:
    """The worker's modules import no store client and no store adapter: its verdicts on failures,
    its ledger reads and moves and its store itself come through the port (core/commit.py) and
    what the entry point hands over (pipeline/store/worker_store.py)."""
    wrong = [
        f"{module_name(path)} imports {t}"
        for path in sorted((ROOT / "worker").glob("*.py"))
        for t in imports(path)
        if t == "pymongo" or t.startswith(("pymongo.", "pipeline.store", "bson"))
    ]
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_round_a_cycle() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while (w := stack.pop()) != v:
                comp.append(w)
            if comp:
                cycles.append(sorted([v, *comp]))

    sys.setrecursionlimit(10_000)
    for v in edges:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_the_checker_sees_late_and_type_checking_imports(tmp_path: Path) -> None:
    probe = tmp_path / "m.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from pipeline.serve.server import build_app\n"
        "def f():\n    from pipeline.kinds import hits\n    import pipeline.cli\n"
    )
    assert {"pipeline.serve.server", "pipeline.kinds.hits", "pipeline.cli"} <= imports(probe)


def test_pure_layers_import_no_io() -> None:
    for path in PURE:
        assert path.exists(), path
        bad = {m for m in imports(path) if m.startswith(IO)}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_a_kind_imports_no_other_kind_and_runtimes_use_kinds_only_through_the_registry() -> None:
    for name, path in MODULES.items():
        mods = {m for m in imports(path) if m.startswith("pipeline.kinds.")}
        parts = name.split(".")
        if parts[1:2] == ["kinds"] and len(parts) > 2 and parts[2] != "kind":
            others = {m for m in mods if m.split(".")[2] not in (parts[2], "kind")}
            assert not others, f"{name} imports another kind: {others}"
        elif layer(name) < 5 and parts[1:2] != ["kinds"]:
            assert not mods - {"pipeline.kinds.kind"}, f"{name} imports a kind directly: {mods}"


def test_benchmarks_are_outside_the_package() -> None:
    assert not (ROOT / "bench").exists()
    for name, path in MODULES.items():
        assert not {m for m in imports(path) if m.startswith(("benchmarks", "tests"))}, name


def test_importing_a_pure_module_loads_no_client_library() -> None:
    """``pipeline/__init__`` loads its public names lazily: a pure module pays for none of them."""
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


def test_runtime_functions_and_modules_stay_small_enough_to_read() -> None:
    """A newcomer reads a runtime (worker, serve, ops) top-down: no function over 80 lines, no
    module over 450 (split by what the parts do, as the flush loop and the middlewares were)."""
    long = []
    for runtime in RUNTIMES:
        for path in sorted((ROOT / runtime.removeprefix("pipeline.")).rglob("*.py")):
            text = path.read_text()
            if len(text.splitlines()) > 450:
                long.append(f"{module_name(path)}: {len(text.splitlines())} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    if size > 80:
                        long.append(f"{module_name(path)}.{node.name}: {size} lines")
    assert not long, "\n".join(long)
