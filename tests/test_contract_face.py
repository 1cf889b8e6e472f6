"""The contract's one face (mpwatch/contract/__init__.py): the names the checker reads, `__all__`
and the lazy table agree, each name is the one its module defines, no reader imports a contract
name from anywhere else, and the face costs the worker side nothing (a training process loads
contract.protocol alone, and no `typing`)."""
from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import mpwatch
import mpwatch.contract as face

ROOT = Path(mpwatch.__file__).parent
REPO = ROOT.parent
INIT = ROOT / "contract" / "__init__.py"


def _checker_names() -> dict[str, str]:
    """name -> module, from the face's TYPE_CHECKING imports."""
    out = {}
    for node in ast.walk(ast.parse(INIT.read_text(encoding="utf-8"))):
        module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
        if module.startswith("mpwatch.contract."):
            out.update({a.asname or a.name: module.rpartition(".")[2] for a in node.names})
    return out


def test_the_checker_the_list_and_the_table_name_the_same_homes() -> None:
    table = {name: module for module, names in face._HOMES.items() for name in names}
    assert _checker_names() == table
    assert sorted(face.__all__) == sorted(table)
    assert len(face.__all__) == len(set(face.__all__))


def test_each_name_of_the_face_is_its_module_s() -> None:
    for module, names in face._HOMES.items():
        home = importlib.import_module(f"mpwatch.contract.{module}")
        for name in names:
            assert getattr(face, name) is getattr(home, name), f"{name} from {module}"


def test_a_name_the_face_lacks_is_no_attribute() -> None:
    assert not hasattr(face, "NoSuchName")


def _around_the_face(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [f"{path.relative_to(REPO)}:{node.lineno}: from {node.module} import ..."
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpwatch.contract.")]


def test_readers_import_contract_names_from_the_face_alone() -> None:
    bad = []
    for top in ("mpwatch", "tests", "bench", "demo"):
        for path in sorted((REPO / top).rglob("*.py")):
            if path.is_relative_to(ROOT / "contract") or "syntax_error" in path.name:
                continue
            bad += _around_the_face(path)
    assert not bad, "contract names imported around mpwatch.contract:\n" + "\n".join(bad)


def test_the_worker_side_loads_the_protocol_alone() -> None:
    code = ("import json, sys, mpwatch.worker.api; print(json.dumps("
            "[sorted(m for m in sys.modules if m.startswith('mpwatch.contract')), 'typing' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert json.loads(out.stdout) == [["mpwatch.contract", "mpwatch.contract.protocol"], False]
