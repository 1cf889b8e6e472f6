"""What the run's forkserver imports before it forks the workers: torch when the script imports
it (or a framework built on it), and every `--preload MODULE`. Read from the script's source
and from its own modules beside it, never by importing anything (the supervisor never imports
torch, nor the user's code). Bounded: at most MAX_FILES files of MAX_BYTES, regular files only.
"""
from __future__ import annotations

import ast
import os
import stat
import sys
from collections.abc import Iterator
from importlib.machinery import PathFinder
from pathlib import Path

from mpwatch.supervisor.options import Options

# Top-level packages whose import is an import of torch: a script that imports one gets torch preloaded.
TORCH_USERS = frozenset({
    "torch", "torchvision", "torchaudio", "torchtext", "lightning", "pytorch_lightning", "transformers",
    "accelerate", "deepspeed", "timm", "torchmetrics", "diffusers", "peft", "trl", "fairseq", "mmengine",
})
# Where workers build what makes torch import its compiler's front end, torch._dynamo (the first
# call of a function under torch._disable_dynamo: 1 CPU-s a worker): an optimizer, a DDP or FSDP
# model, torch.compile, named in the sources; or a framework that trains (Lightning, transformers'
# Trainer, ...). The forkserver then imports it once (worker.boot.forkserver's FOLLOWERS).
BUILDERS = frozenset({"optim", "DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP",
                      "fully_shard", "compile"})
NAMED_BUILDERS = BUILDERS - {"compile"}  # a bare `compile` is the builtin unless imported from torch
BUILDER_MODULES = ("torch.optim", "torch.nn.parallel", "torch.distributed.fsdp")
TRAINERS = TORCH_USERS - {"torch", "torchvision", "torchaudio", "torchtext", "torchmetrics"}
MAX_FILES = 32
MAX_BYTES = 1 << 20


def modules(opts: Options) -> tuple[list[str], str | None]:
    """(modules to preload, in order; why none can be preloaded where some were wanted)."""
    if not opts.preload_on:
        return [], None
    asked = list(dict.fromkeys(opts.preload))
    if opts.launch == "exec":
        why = "--no-python runs an executable, not the preloaded interpreter" if asked else None
        return [], why
    wanted = ["torch"] if _torch_installed() and imports_torch(opts) else []
    return list(dict.fromkeys(wanted + asked)), None


def _torch_installed() -> bool:
    """torch is where the workers' interpreter would find it (found, not imported)."""
    try:
        return PathFinder.find_spec("torch") is not None
    except (ImportError, ValueError, OSError):
        return False


def imports_torch(opts: Options) -> bool:
    """The script (or the module of -m), or one of its own modules, imports torch or a package built on it."""
    return any(level == 0 and name.split(".")[0] in TORCH_USERS
               for tree in _trees(opts) for name, level in _imports(tree))


def builds_models(opts: Options) -> bool:
    """The script or one of its own modules names an optimizer, a DDP or FSDP model or torch.compile
    (anywhere: a function may build it), or imports a framework that trains: its workers will import
    torch's compiler front end, which the forkserver then imports once for them (FOLLOWERS)."""
    return any(_builds(tree) for tree in _trees(opts))


def _builds(tree: ast.Module) -> bool:
    """One file names a builder. `compile` counts only as torch's (torch.compile, or compile imported
    from torch): re.compile and the builtin compile() build no model."""
    torch_names = {a.asname or "torch" for node in ast.walk(tree) if isinstance(node, ast.Import)
                   for a in node.names if a.name == "torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in BUILDERS:
            if node.attr != "compile" or (isinstance(node.value, ast.Name) and node.value.id in torch_names):
                return True
        elif isinstance(node, ast.Name) and node.id in NAMED_BUILDERS:
            return True
        elif isinstance(node, ast.Import):
            if any(_builder_module(a.name) for a in node.names):
                return True
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if _builder_module(module):
                return True
            from_torch = node.level == 0 and module.split(".")[0] == "torch"
            if from_torch and any(a.name in BUILDERS for a in node.names):  # from torch import optim
                return True
    return False


def _builder_module(name: str) -> bool:
    return name.split(".")[0] in TRAINERS or name.startswith(BUILDER_MODULES)


def _trees(opts: Options) -> Iterator[ast.Module]:
    """The syntax trees of the script (or the module of -m) and of its own modules it imports,
    at most MAX_FILES."""
    cwd = Path(opts.cwd)
    if opts.launch == "module":
        first = module_file(opts.script, [str(cwd), *sys.path[1:]])
        base = cwd
    else:
        first = cwd / opts.script
        base = first.parent
    todo: list[Path] = [first] if first is not None else []
    seen: set[Path] = set()
    while todo and len(seen) < MAX_FILES:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        tree = _parse(path)
        if tree is None:
            continue
        yield tree
        for name, level in _imports(tree):
            local = _local(name, level, path.parent if level else base)
            if local is not None:
                todo.append(local)


def _parse(path: Path) -> ast.Module | None:
    """A regular file's syntax tree, or None (a FIFO, a huge file, bytes that are no Python)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_BYTES)
        return ast.parse(data, str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    finally:
        os.close(fd)


def _imports(tree: ast.Module) -> list[tuple[str, int]]:
    """(module, relative level) of the imports every run of the file makes: those at its top level
    (in a `try` too, and under `if __name__ == "__main__":`), not one under a condition or in a
    function, which a worker may never reach (a script that imports torch only where it has a GPU)."""
    out: list[tuple[str, int]] = []
    for node in _always(tree.body):
        if isinstance(node, ast.Import):
            out += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            out.append((base, node.level))
            if node.level:  # from . import model: model may be a module of its own
                out += [(f"{base}.{a.name}".lstrip("."), node.level) for a in node.names]
    return out


def _always(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a body that run whenever it runs, blocks that always run entered."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, ast.Try):
            out += _always(node.body + node.orelse + node.finalbody)
        elif isinstance(node, ast.With) or (isinstance(node, ast.If) and _is_main_guard(node.test)):
            out += _always(node.body)
    return out


def _is_main_guard(test: ast.expr) -> bool:
    """`__name__ == "__main__"`: a worker runs its script as __main__."""
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _local(name: str, level: int, base: Path) -> Path | None:
    """The file of `name` among the script's own modules (beside it, or its package's for a
    relative import), or None."""
    for _ in range(max(0, level - 1)):
        base = base.parent
    if not name:
        return None
    path = base.joinpath(*name.split("."))
    for cand in (path.with_suffix(".py"), path / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def module_file(name: str, search: list[str]) -> Path | None:
    """The source file of MODULE (a.b.c) as `python -m` would find it, found without importing
    its packages (their __init__ runs in the workers, never here)."""
    path: list[str] | None = search
    spec = None
    for i, part in enumerate(name.split(".")):
        try:
            spec = PathFinder.find_spec(part, path)
        except (ImportError, ValueError, OSError):
            return None
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or []) if i < name.count(".") else None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    origin = Path(spec.origin)
    if spec.submodule_search_locations:  # python -m PACKAGE runs its __main__
        main = origin.parent / "__main__.py"
        return main if main.is_file() else None
    return origin
