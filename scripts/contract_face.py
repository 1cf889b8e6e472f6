#!/usr/bin/env python3
"""Keep mpwatch.contract's one face: mpwatch/contract/__init__.py lists every contract name a
reader imports (`__all__`), and every reader imports those names from `mpwatch.contract`, never
from the module that defines them.

Run from a checkout's root (or give it as the argument), with the project's virtualenv:

    .venv/bin/python scripts/contract_face.py [REPO] [--check]

It is safe to run again at any time (after merging a branch that added imports of a contract
module, say): what is already in place is left as it is. What it does:

1. reads every module of mpwatch/contract/ (ast, nothing imported) for the public names each
   defines (classes, functions, constants, type aliases; not what a module imports);
2. finds, in mpwatch/ (outside contract/), tests/, bench/, demo/ and scripts/, every
   `from mpwatch.contract.<module> import NAME, ...` (at any depth, type-only ones too) and
   rewrites it as `from mpwatch.contract import NAME, ...` (aliases kept); the module imports
   `from mpwatch.contract import protocol` stay as they are (a module read as a namespace);
3. writes mpwatch/contract/__init__.py: the face's names, those already there and those found
   in 2, each from the module that defines it: for the checker under TYPE_CHECKING, as
   `__all__`, and as the table of the lazy `__getattr__` (PEP 562) that loads a name's module on
   first use, so that `import mpwatch.contract.protocol` (the worker side, in every training
   process) still loads that module alone;
4. in the contract's own modules, each name is imported from the module that defines it, and a
   re-export (`from mpwatch.contract.x import A as A`) becomes a plain import, dropped by ruff
   when the module does not use it: the modules keep importing each other directly (never
   through the face), the face is for readers;
5. sorts the import blocks it changed with `ruff check --select I,F401 --fix` (F401 in the
   contract only), in the files that were sorted before (a test file whose imports were never
   sorted keeps its order).

--check changes nothing, prints what it would change, and exits 1 if anything would change.
A name a reader imports that no contract module defines is an error (exit 2); so is a name that
two contract modules define, or a face name that is also the name of a contract module.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "mpwatch.contract"
READER_ROOTS = ("mpwatch", "tests", "bench", "demo", "scripts")
LINE_MAX = 110

HEADER = '''"""What every side shares: the status schema, event names, the wire format, value coercers and
pure rules. This is the contract's one face: a reader imports every contract name from here
(`from mpwatch.contract import Status, Event`), never from the module that defines it; a module
read as a namespace is imported from here too (`from mpwatch.contract import protocol`).

The face is lazy (PEP 562): importing the package loads none of its modules, and a name loads its
own module on first use. The worker side imports mpwatch.contract.protocol in every training
process at `import mpwatch`, and must load that module alone (the standard library only, no
`typing`). The checker reads the names from the TYPE_CHECKING block; `__all__` and `_HOMES` say
the same for the run time: a name new to the face goes in all three (tests/test_contract_face.py
checks that they agree, that each name is where it says, and that no reader goes around the face).
"""
from __future__ import annotations

'''

FOOTER = '''

def _home(name: str) -> str | None:
    for module, names in _HOMES.items():
        if name in names:
            return module
    return None


if not TYPE_CHECKING:
    def __getattr__(name: str) -> object:
        """A face name, loaded from its module on first use (then a plain attribute)."""
        module = _home(name)
        if module is None:  # a submodule (`from mpwatch.contract import protocol`) is imported by Python
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
'''


@dataclass
class Rewrite:
    path: Path
    start: int  # offsets into the file's text
    end: int
    text: str


def defined_names(path: Path) -> set[str]:
    """The public names a module defines at its top level (inside top-level if/try blocks too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        out.add(t.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out.add(node.target.id)
            elif sys.version_info >= (3, 12) and isinstance(node, ast.TypeAlias):
                out.add(node.name.id)  # type: ignore[attr-defined]
            elif isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return {n for n in out if not n.startswith("_") and n != "TYPE_CHECKING"}


def contract_defs(repo: Path) -> tuple[dict[str, list[str]], set[str]]:
    """name -> the modules defining it; the module names."""
    defs: dict[str, list[str]] = {}
    modules = set()
    for path in sorted((repo / "mpwatch" / "contract").glob("*.py")):
        if path.name == "__init__.py":
            continue
        modules.add(path.stem)
        for name in defined_names(path):
            defs.setdefault(name, []).append(path.stem)
    return defs, modules


def current_face(repo: Path) -> dict[str, str]:
    """The face's names today and their modules, from `_HOMES` (none before the face exists)."""
    path = repo / "mpwatch" / "contract" / "__init__.py"
    if not path.exists():
        return {}
    out = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == "_HOMES" and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.Call)
                for name in ast.literal_eval(value.args[0]):
                    out[name] = key.value
    return out


def resolve(wanted: dict[str, set[str]], defs: dict[str, list[str]], face: dict[str, str],
            problems: list[str]) -> dict[str, str]:
    """Each face name's module: the face's own choice, else the one module defining it, else the
    one module the readers name for it (contract.protocol's CHECKPOINT is a frame's name, read as
    protocol.CHECKPOINT; contract.actions' is the action the readers import by name)."""
    out = {}
    for name in sorted(set(face) | set(wanted)):
        where = defs.get(name, [])
        if face.get(name) in where:
            out[name] = face[name]
        elif len(where) == 1:
            out[name] = where[0]
        elif len(named := wanted.get(name, set()) & set(where)) == 1:
            out[name] = named.pop()
        elif not where:
            problems.append(f"{name}: defined in no contract module")
        else:
            problems.append(f"{name}: defined in {', '.join(where)}, and the readers do not say which")
    return out


def reader_files(repo: Path) -> list[Path]:
    out = []
    contract = repo / "mpwatch" / "contract"
    for root in READER_ROOTS:
        base = repo / root
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.py")):
            if path.is_relative_to(contract) or _unparsable(path):
                continue
            out.append(path)
    return out


def _unparsable(path: Path) -> bool:
    try:
        ast.parse(path.read_text(encoding="utf-8"))
        return False
    except SyntaxError:
        return True


def _offsets(text: str) -> list[int]:
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _import_text(module: str, aliases: list[ast.alias], indent: str) -> str:
    """`from MODULE import a, b as c`, wrapped in parentheses past LINE_MAX."""
    names = [a.name if a.asname is None else f"{a.name} as {a.asname}" for a in aliases]
    one = f"{indent}from {module} import {', '.join(names)}"
    if len(one) <= LINE_MAX:
        return one.lstrip(" ")
    body = ",\n".join(f"{indent}    {n}" for n in names)  # no trailing comma: ruff may join it again
    return f"from {module} import (\n{body}\n{indent})"


def reader_rewrites(path: Path, wanted: dict[str, set[str]]) -> list[Rewrite]:
    """The imports of contract modules' names in a reader, rewritten to the face; each name they
    import is added to `wanted`, with the module it was imported from."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    starts = _offsets(text)
    out: list[Rewrite] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.startswith(PACKAGE + ".")):
            continue
        for a in node.names:
            wanted.setdefault(a.name, set()).add(node.module[len(PACKAGE) + 1:])
        line = text[starts[node.lineno - 1]:starts[node.lineno]]
        indent = line[:len(line) - len(line.lstrip(" "))]
        start = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[operator]
        out.append(Rewrite(path, start, end, _import_text(PACKAGE, node.names, indent)))
    return out


def contract_rewrites(path: Path, homes: dict[str, str]) -> list[Rewrite]:
    """A contract module's imports of its siblings' names, each from the module that defines it,
    re-exports (`import A as A`) as plain imports."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    starts = _offsets(text)
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                and node.module.startswith(PACKAGE + ".")):
            continue
        if all(a.asname != a.name and homes.get(a.name, node.module[len(PACKAGE) + 1:])
               == node.module[len(PACKAGE) + 1:] for a in node.names):
            continue  # each name from its own module already
        by_home: dict[str, list[ast.alias]] = {}
        for a in node.names:
            home = f"{PACKAGE}.{homes[a.name]}" if a.name in homes else node.module
            by_home.setdefault(home, []).append(ast.alias(a.name, None if a.asname == a.name else a.asname))
        line = text[starts[node.lineno - 1]:starts[node.lineno]]
        indent = line[:len(line) - len(line.lstrip(" "))]
        start = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[operator]
        parts = [_import_text(m, names, indent) for m, names in sorted(by_home.items())]
        out.append(Rewrite(path, start, end, f"\n{indent}".join(parts)))
    return out


def apply(rewrites: list[Rewrite]) -> set[Path]:
    changed = set()
    by_path: dict[Path, list[Rewrite]] = {}
    for r in rewrites:
        by_path.setdefault(r.path, []).append(r)
    for path, rs in by_path.items():
        text = path.read_text(encoding="utf-8")
        new = text
        for r in sorted(rs, key=lambda r: r.start, reverse=True):
            new = new[:r.start] + r.text + new[r.end:]
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.add(path)
    return changed


def face_text(face: dict[str, str]) -> str:
    by_module: dict[str, list[str]] = {}
    for name, module in face.items():
        by_module.setdefault(module, []).append(name)
    order = sorted(by_module)
    lines = [HEADER, "TYPE_CHECKING = False  # `typing` is not loaded at run time (the worker side)",
             "if TYPE_CHECKING:"]
    for module in order:
        names = sorted(by_module[module], key=_isort_key)
        lines.append(_import_text(f"{PACKAGE}.{module}", [ast.alias(n, None) for n in names], "    ")
                     .replace("from ", "    from ", 1))
    lines.append("")
    lines.append("__all__ = [")
    lines += _wrapped([f'"{n}"' for n in sorted(face)], "    ")
    lines.append("]")
    lines.append("")
    lines.append("# The module each name of the face lives in (the lazy __getattr__ below reads it).")
    lines.append("_HOMES: dict[str, frozenset[str]] = {")
    for module in order:
        names = sorted(by_module[module])
        head = f'    "{module}": frozenset({{'
        body = _wrapped([f'"{n}"' for n in names], " " * len(head), LINE_MAX - 3)  # room for "}),"
        body[0] = head + body[0].lstrip(" ")
        body[-1] = body[-1].rstrip(",") + "}),"
        lines += body
    lines.append("}")
    return "\n".join(lines) + "\n" + FOOTER


def _isort_key(name: str) -> tuple[int, str]:
    """ruff's isort order inside one import: CONSTANTS, Classes, functions."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name.lower()


def _wrapped(items: list[str], indent: str, width: int = LINE_MAX) -> list[str]:
    out: list[str] = []
    line = indent
    for item in items:
        piece = item + ", "
        if len(line) + len(piece.rstrip()) > width and line.strip():
            out.append(line.rstrip())
            line = indent
        line += piece
    out.append(line.rstrip())
    return out


def _sorted_before(repo: Path, paths: list[Path]) -> set[Path]:
    """The files whose imports ruff finds sorted now."""
    out = set()
    for path in paths:
        res = subprocess.run([_ruff(), "check", "--select", "I", "--quiet", str(path)], cwd=repo,
                             capture_output=True, text=True)
        if res.returncode == 0:
            out.add(path)
    return out


def _as_ruff_sorts(repo: Path, path: Path, text: str) -> str:
    """`text` as `ruff check --select I,RUF022 --fix` leaves it (the import lists, `__all__`)."""
    res = subprocess.run([_ruff(), "check", "--select", "I,RUF022", "--fix", "--quiet", "--exit-zero",
                          "--stdin-filename", str(path), "-"], cwd=repo, input=text, capture_output=True,
                         text=True, check=True)
    return res.stdout


def _ruff() -> str:
    venv = Path(sys.executable).with_name("ruff")
    return str(venv) if venv.exists() else "ruff"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    repo = Path(args[0] if args else ".").resolve()
    defs, modules = contract_defs(repo)
    rewrites: list[Rewrite] = []
    wanted: dict[str, set[str]] = {}
    for path in reader_files(repo):
        rewrites += reader_rewrites(path, wanted)
    problems: list[str] = []
    face = resolve(wanted, defs, current_face(repo), problems)
    problems += [f"{n}: a face name that is also a contract module" for n in sorted(set(face) & modules)]
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 2
    # inside the contract, a name defined once is imported from there; one defined twice as the face has it
    homes = {n: ms[0] for n, ms in defs.items() if len(ms) == 1} | face
    for path in sorted((repo / "mpwatch" / "contract").glob("*.py")):
        if path.name != "__init__.py":
            rewrites += contract_rewrites(path, homes)
    init = repo / "mpwatch" / "contract" / "__init__.py"
    new_init = _as_ruff_sorts(repo, init, face_text(face))
    touched = sorted({r.path for r in rewrites if r.path.read_text(encoding="utf-8")[r.start:r.end] != r.text})
    init_changes = init.read_text(encoding="utf-8") != new_init
    if check:
        for path in touched:
            print(f"would rewrite imports in {path.relative_to(repo)}")
        if init_changes:
            print(f"would write {init.relative_to(repo)} ({len(face)} names)")
        return 1 if touched or init_changes else 0
    sorted_before = _sorted_before(repo, touched)
    changed = apply(rewrites)
    init.write_text(new_init, encoding="utf-8")
    contract = [p for p in changed if p.parent == init.parent]
    if contract:  # F401 drops what a module no longer uses; then the lists it shortened are joined again
        subprocess.run([_ruff(), "check", "--select", "F401", "--fix", "--quiet", *map(str, contract)],
                       cwd=repo, check=False)
        subprocess.run([_ruff(), "check", "--select", "I", "--fix", "--quiet", "--config",
                        "lint.isort.split-on-trailing-comma = false", *map(str, contract)], cwd=repo, check=False)
    others = [p for p in changed if p.parent != init.parent and p in sorted_before]
    if others:
        subprocess.run([_ruff(), "check", "--select", "I", "--fix", "--quiet", *map(str, others)],
                       cwd=repo, check=False)
    print(f"{len(changed)} files rewritten, {len(face)} names in the face ({init.relative_to(repo)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
