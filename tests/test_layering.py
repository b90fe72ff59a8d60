"""The import graph of ``pivotgym`` runs one way (issue 16): no cycles, no module importing a higher layer,
and nothing but the command line importing :mod:`pivotgym.cli`.

The graph is read with ``ast`` from every ``pivotgym/**/*.py``: module-level and function-level imports,
``import x``, ``from x import y`` (``from pivotgym import sub`` counts as the submodule ``pivotgym.sub``, any
other name from ``pivotgym`` as the package facade), relative imports, and ``importlib.import_module`` calls
with a literal name. ``docs/architecture.md`` ("Layers") explains the order.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "pivotgym"
ROOT = "pivotgym"

#: bottom to top; a module may import its own layer and lower ones. An entry names a module and its
#: submodules, except the root package ``pivotgym`` (the facade), which names only itself.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "records and tools",
        [
            "pivotgym._version",
            "pivotgym.errors",
            "pivotgym.config",
            "pivotgym.types",
            "pivotgym.spaces",
            "pivotgym.hookspecs",
            "pivotgym.jsonl",
            "pivotgym.execution",
            "pivotgym.sandbox",
            "pivotgym.parsing",
            "pivotgym.remote",
        ],
    ),
    ("envs, verifiers, samplers", ["pivotgym.env", "pivotgym.verify", "pivotgym.states", "pivotgym.sampling"]),
    ("declarative and MCP envs", ["pivotgym.bigbench", "pivotgym.declarative", "pivotgym.mcp"]),
    ("default plugin", ["pivotgym.builtins"]),
    ("plugin manager and registry", ["pivotgym.plugins", "pivotgym.registry"]),
    ("the episode loop and simulated users", ["pivotgym.rollout", "pivotgym.users"]),
    ("pivot profiling and selection", ["pivotgym.pivot"]),
    ("evaluation", ["pivotgym.eval"]),
    ("training", ["pivotgym.train"]),
    (
        "adapters and checks",
        ["pivotgym.calibration", "pivotgym.checker", "pivotgym.integrations", "pivotgym.serve"],
    ),
    ("workflows", ["pivotgym.experiment"]),
    ("package facade", ["pivotgym"]),
    ("command line", ["pivotgym.cli"]),
]


# ------------------------------------------------------------------------------------------ reading the graph
def module_name(path: Path, package_dir: Path = PACKAGE_DIR) -> str:
    """``pivotgym/a/b.py`` -> ``pivotgym.a.b``; ``pivotgym/a/__init__.py`` -> ``pivotgym.a``."""
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _owner(name: str, known: set[str]) -> str | None:
    """The longest known module that ``name`` is or lies in (``pivotgym.a.B`` -> ``pivotgym.a``)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The ``known`` modules that ``source`` (the text of ``module``) imports anywhere in its body."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(_owner(alias.name, known) or "" for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else _owner(base, known) or "")
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "import_module"
        ):
            found.add(_owner(node.args[0].value, known) or "")
    found.discard("")
    found.discard(module)
    return found


def import_graph(package_dir: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    """Module -> the package modules it imports, for every ``.py`` file under ``package_dir``."""
    files = {module_name(p, package_dir): p for p in sorted(package_dir.rglob("*.py"))}
    known = set(files)
    return {
        name: imported_modules(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", known)
        for name, path in files.items()
    }


# ------------------------------------------------------------------------------------------ the rules
def _adjacency(edges: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    graph = {node: sorted(set(targets)) for node, targets in edges.items()}
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, [])
    return graph


def cyclic_groups(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (Tarjan's strongly connected components
    with more than one module, or one importing itself), each sorted."""
    graph = _adjacency(edges)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:  # the graph has ~100 nodes, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph[node]:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(groups)


def find_cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """One shortest cycle (``[a, b, ..., a]``) through the first module of each of :func:`cyclic_groups`."""
    graph = _adjacency(edges)
    return [_cycle_through(group[0], set(group), graph) for group in cyclic_groups(edges)]


def _cycle_through(start: str, group: set[str], graph: Mapping[str, list[str]]) -> list[str]:
    """A shortest path ``start -> ... -> start`` inside ``group`` (breadth first)."""
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in graph[node]:
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if target in group and target not in parents:
                    parents[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{start} is in no cycle")  # pragma: no cover - find_cycles passes cyclic groups only


def layer_of(module: str, layers: Sequence[tuple[str, Sequence[str]]] = LAYERS) -> int | None:
    """The index of the layer whose longest entry matches ``module``; None if no entry does."""
    best: tuple[int, int] | None = None
    for level, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            matches = module == prefix or ("." in prefix and module.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), level)
    return None if best is None else best[1]


def unassigned_modules(
    edges: Mapping[str, Iterable[str]], layers: Sequence[tuple[str, Sequence[str]]] = LAYERS
) -> list[str]:
    """Modules no layer names: a new module must be given a layer in ``LAYERS``."""
    return sorted(m for m in edges if layer_of(m, layers) is None)


def upward_imports(
    edges: Mapping[str, Iterable[str]], layers: Sequence[tuple[str, Sequence[str]]] = LAYERS
) -> list[str]:
    """``"low (layer) -> high (layer)"`` for every import of a module from a higher layer."""
    found = []
    for module, targets in sorted(edges.items()):
        level = layer_of(module, layers)
        for target in sorted(targets):
            target_level = layer_of(target, layers)
            if level is not None and target_level is not None and target_level > level:
                found.append(f"{module} ({layers[level][0]}) -> {target} ({layers[target_level][0]})")
    return found


def cli_imports(edges: Mapping[str, Iterable[str]], cli: str = f"{ROOT}.cli") -> list[str]:
    """Imports of the command line from any module outside it."""

    def in_cli(name: str) -> bool:
        return name == cli or name.startswith(cli + ".")

    return [
        f"{m} -> {t}" for m, targets in sorted(edges.items()) if not in_cli(m) for t in sorted(targets) if in_cli(t)
    ]


# ------------------------------------------------------------------------------------------ the package
@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_graph_sees_the_package(graph):
    assert {"pivotgym", "pivotgym.registry", "pivotgym.cli.app", "pivotgym.sandbox.bwrap"} <= set(graph)
    assert "pivotgym.plugins" in graph["pivotgym.registry"]  # a module-level import
    assert "pivotgym.declarative" in graph["pivotgym.builtins"]  # an import inside a function


def test_no_import_cycles(graph):
    report = [
        f"{' -> '.join(cycle)}  (modules that reach each other: {', '.join(group)})"
        for cycle, group in zip(find_cycles(graph), cyclic_groups(graph))
    ]
    assert not report, "import cycles:\n" + "\n".join(report)


def test_every_module_has_a_layer(graph):
    missing = unassigned_modules(graph)
    assert not missing, f"give these modules a layer in tests/test_layering.py LAYERS: {missing}"


def test_no_module_imports_a_higher_layer(graph):
    upward = upward_imports(graph)
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_only_the_command_line_imports_it(graph):
    assert cli_imports(graph) == []


# ------------------------------------------------------------------------------------------ the checks can fail
TWO_LAYERS = [("low", ["p.low"]), ("high", ["p.high"])]


def test_a_cycle_is_reported_with_its_path():
    edges = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a", "p.d"}, "p.d": set(), "p.e": {"p.e"}}
    assert find_cycles(edges) == [["p.a", "p.b", "p.c", "p.a"], ["p.e", "p.e"]]
    assert cyclic_groups(edges) == [["p.a", "p.b", "p.c"], ["p.e"]]
    assert find_cycles({"p.a": {"p.b"}, "p.b": {"p.c"}}) == []


def test_an_upward_import_and_an_unassigned_module_are_reported():
    edges = {"p.low.x": {"p.high"}, "p.high": {"p.low.x"}, "p.new": set()}
    assert upward_imports(edges, TWO_LAYERS) == ["p.low.x (low) -> p.high (high)"]
    assert unassigned_modules(edges, TWO_LAYERS) == ["p.new"]
    assert layer_of("p.lowly", TWO_LAYERS) is None  # a prefix matches whole dotted names only


def test_the_root_entry_names_only_the_facade():
    assert layer_of("pivotgym") == len(LAYERS) - 2
    assert layer_of("pivotgym.brand_new_module") is None


def test_a_library_import_of_the_cli_is_reported():
    assert cli_imports({"pivotgym.eval": {"pivotgym.cli.output"}, "pivotgym.cli.app": {"pivotgym.cli.eval"}}) == [
        "pivotgym.eval -> pivotgym.cli.output"
    ]


def test_imports_are_read_everywhere_and_resolved_to_modules():
    known = {
        "pivotgym",
        "pivotgym.registry",
        "pivotgym.cli",
        "pivotgym.cli.output",
        "pivotgym.sandbox",
        "pivotgym.sandbox.base",
        "pivotgym.types",
    }
    source = (
        "import json\n"
        "from pivotgym import registry, hookimpl\n"  # a submodule, and a name of the facade
        "from .base import Limits\n"  # relative, from the package pivotgym.sandbox
        "def f():\n"
        "    from pivotgym.cli.output import table\n"
        "    import pivotgym.types.Task\n"
        "    return importlib.import_module('pivotgym.cli')\n"
    )
    assert imported_modules(source, "pivotgym.sandbox", True, known) == {
        "pivotgym.registry",
        "pivotgym",
        "pivotgym.sandbox.base",
        "pivotgym.cli.output",
        "pivotgym.types",
        "pivotgym.cli",
    }


def reachable(edges: Mapping[str, Iterable[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others (function-level imports included)."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        for target in edges.get(stack.pop(), ()):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_evaluating_reaches_no_trainer(graph):
    """``pivotgym eval`` (and profiling) never import the trainers: torch optimisers, checkpoints and the
    engines' weight pushing are not what scoring a model needs."""
    for start in ("pivotgym.cli.eval", "pivotgym.eval", "pivotgym.pivot"):
        trainers = sorted(m for m in reachable(graph, start) if layer_of(m) == layer_of("pivotgym.train"))
        assert trainers == [], f"{start} reaches {trainers}"
    assert "pivotgym.train.config" in reachable(graph, "pivotgym.cli.train")  # the check can see a trainer


# packages only: an editable install by another pip (.venv-verl's) leaves a `pivotgym_*.egg-info` folder beside one
PLUGIN_PACKAGES = sorted(
    p for p in (PACKAGE_DIR.parent / "plugins").glob("*/pivotgym_*") if p.is_dir() and (p / "__init__.py").is_file()
)


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_no_import_cycles_in_a_first_party_plugin(package):
    """The plugins' modules import one way too (function-level imports included): a circle hidden in a
    function-level import once joined planning's env and generators, and two pairs of SWE modules."""
    graph = import_graph(package)
    assert len(graph) > 3, f"{package} read as {sorted(graph)}"
    assert find_cycles(graph) == [], f"import cycles in {package.name}"


#: what a plugin may import from the core: the facade and the modules it names as public (docs/plugins.md)
PUBLIC_API = {
    ROOT,
    f"{ROOT}.types",
    f"{ROOT}.errors",
    f"{ROOT}.verify",
    f"{ROOT}.sandbox",
    f"{ROOT}.parsing",
    f"{ROOT}.users",
}


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_a_first_party_plugin_imports_only_the_public_api(package, graph):
    """A first-party plugin is written as a third party would write it: it imports ``pivotgym`` and the public
    modules only (function-level imports included), so a core refactoring that keeps those keeps the plugins."""
    known = set(graph)
    reached = {
        f"{module_name(path, package)} -> {core}"
        for path in sorted(package.rglob("*.py"))
        for core in imported_modules(path.read_text(encoding="utf-8"), module_name(path, package), False, known)
        if core not in PUBLIC_API
    }
    assert sorted(reached) == []


#: every first-party plugin's modules by role (docs/plugins.md, "Lay out a distribution"); others are its wings
PLUGIN_SHAPE = ("__init__.py", "plugin.py", "env.py", "verifier.py")


@pytest.mark.parametrize("package", PLUGIN_PACKAGES, ids=lambda p: p.name)
def test_a_first_party_plugin_has_the_common_shape(package):
    """A reader who knows one plugin knows where to look in the others: hooks in ``plugin.py`` (the entry
    point), environments in ``env.py``, the functional verifier in ``verifier.py``, commands in ``commands.py``."""
    missing = [name for name in PLUGIN_SHAPE if not (package / name).is_file()]
    assert missing == [], f"{package.name} lacks {missing}"
    pyproject = (package.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert f'= "{package.name}.plugin"' in pyproject, "the pivotgym entry point is not the plugin module"
    hooks = (package / "plugin.py").read_text(encoding="utf-8")
    if "def register_commands" in hooks:
        assert (package / "commands.py").is_file() and f"{package.name}.commands" in hooks


def test_the_public_api_check_sees_an_internal_import():
    known = {ROOT, f"{ROOT}.verify", f"{ROOT}.verify.compare", f"{ROOT}.sampling.models"}
    source = "from pivotgym.verify import param_default\ndef f():\n    from pivotgym.sampling.models import cache_root"
    found = imported_modules(source, "pivotgym_x.m", False, known)
    assert found - PUBLIC_API == {f"{ROOT}.sampling.models"} and f"{ROOT}.verify" in found
