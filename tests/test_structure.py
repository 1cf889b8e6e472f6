"""The house's shape, read from the source with ast (nothing imported): no import cycle among
mpwatch's modules at run time, the product never imports mpwatch.testing, every double lives
there and only the GPU seam's loaders name it, and the package's top level stays a short list
of rooms."""
from __future__ import annotations

import ast
import re
from collections.abc import Collection
from pathlib import Path

import mpwatch

ROOT = Path(mpwatch.__file__).parent
TOP_ROOMS = {"worker", "contract", "rundir", "supervisor", "probes", "sources", "settings.py", "text",
             "tui", "cli", "testing"}
TOP_MAX = 11  # entries of mpwatch/ besides __init__.py and __main__.py
# The GPU seam's loaders, one each side of the process boundary: they alone name the doubles
# (by module name, at run time), and settings.py names the switch of the supervisor's.
SEAM_LOADERS = {"mpwatch.probes.seam", "mpwatch.worker.seam"}
DOUBLE = re.compile(r"scripted|stand[-_]ins?\b", re.IGNORECASE)  # how a double is spoken of
TESTING = re.compile(r"\btesting\b")


def _modules() -> dict[str, Path]:
    """Module name -> file, for every .py under mpwatch/."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool, modules: Collection[str]) -> list[str]:
    """Every module name imported at run time (module level and inside functions), not the
    ones under `if TYPE_CHECKING:`. `from a import b` is an import of a.b when that is a
    module, else of a (a package's submodule never imports the package back by being in it)."""
    out: list[str] = []
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append(sub if sub in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        deps = set()
        for imp in _imports(tree, name, path.name == "__init__.py", mods):
            if imp in mods and imp != name:
                deps.add(imp)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each as a cycle
    through it, so that a failure names the modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comps: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return [_path_through(graph, set(c)) for c in comps]


def _path_through(graph: dict[str, set[str]], comp: set[str]) -> list[str]:
    """One cycle inside a strongly connected component, from its first module back to it."""
    start = min(comp)
    prev: dict[str, str] = {}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & comp):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if w not in prev:
                prev[w] = v
                todo.append(w)
    return sorted(comp)


def test_no_import_cycle_at_run_time() -> None:
    cycles = _cycles(_graph())
    assert not cycles, "import cycles at run time:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    src = "import x\nif TYPE_CHECKING:\n    import y\ndef f():\n    from . import z\n"
    assert _imports(ast.parse(src), "p.m", False, {"p.z"}) == ["x", "p.z"]
    assert _imports(ast.parse("from p import f"), "p.m", False, {"p.z"}) == ["p"]


def test_the_product_never_imports_testing() -> None:
    bad = []
    for name, path in _modules().items():
        if name == "mpwatch.testing" or name.startswith("mpwatch.testing."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):  # type-only imports too: the product never names it
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if isinstance(node, ast.ImportFrom) and node.module == "mpwatch":
                names += [f"mpwatch.{a.name}" for a in node.names]
            bad += [f"{name}: {n}" for n in names if (n + ".").startswith("mpwatch.testing.")]
    assert not bad, "the product imports mpwatch.testing:\n" + "\n".join(bad)


def test_top_level_is_a_short_list_of_rooms() -> None:
    entries = {p.name for p in ROOT.iterdir()
               if p.name not in ("__init__.py", "__main__.py", "__pycache__") and not p.name.startswith(".")}
    assert len(entries) <= TOP_MAX, f"{len(entries)} entries in mpwatch/: {sorted(entries)}"
    assert entries <= TOP_ROOMS, f"not a room of the house: {sorted(entries - TOP_ROOMS)}"


def _all_imports(path: Path) -> set[str]:
    """Every mpwatch module a file names in an import, type-only ones too."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.startswith("mpwatch.")}


def test_the_worker_side_names_no_other_room_and_its_channel_no_sibling() -> None:
    """What runs in a training process (mpwatch/worker/) imports none of supervisor, tui,
    sources, probes or cli; worker.channel, which every sibling holds, imports none of them."""
    mods = _modules()
    bad = []
    for name, path in mods.items():
        if not (name + ".").startswith("mpwatch.worker."):
            continue
        for imp in _all_imports(path):
            if imp.split(".")[1] in ("supervisor", "tui", "sources", "probes", "cli", "testing"):
                bad.append(f"{name}: {imp}")
            if name == "mpwatch.worker.channel" and imp.startswith("mpwatch.worker.") and imp in mods:
                bad.append(f"{name}: {imp} (a sibling)")
    assert not bad, "\n".join(bad)


def _product() -> dict[str, Path]:
    """The product's modules: every one outside mpwatch/testing/."""
    return {n: p for n, p in _modules().items() if not (n + ".").startswith("mpwatch.testing.")}


def test_every_double_lives_under_testing() -> None:
    """No file outside mpwatch/testing/ is named for a double, and no product module speaks of one
    (code, comments or docstrings) but the seam's loaders and settings.py: the product reaches a
    double through the GPU seam alone."""
    named = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
             if "__pycache__" not in p.parts and p.relative_to(ROOT).parts[0] != "testing"
             and DOUBLE.search(p.name)]
    assert not named, "named for a double, outside mpwatch/testing/: " + ", ".join(sorted(named))
    spoken = [f"{name}:{i}: {line.strip()}" for name, path in _product().items()
              if name not in SEAM_LOADERS | {"mpwatch.settings"}
              for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if DOUBLE.search(line)]
    assert not spoken, "a product module speaks of a double (name the seam):\n" + "\n".join(spoken)


def test_the_seam_loaders_alone_name_testing() -> None:
    """mpwatch.testing is named (a module name to import, a word in a comment) by the seam's
    loaders and no other product module."""
    naming = {name for name, path in _product().items()
              if TESTING.search(path.read_text(encoding="utf-8"))}
    assert naming == SEAM_LOADERS, f"name testing: {sorted(naming)}; the loaders: {sorted(SEAM_LOADERS)}"
