"""What the install costs, and what its bytecode saves every process after it.

- The install's CPU time (this process's children: pip and its builds) into a fresh venv, with pip
  byte-compiling what it installs (what `make venv` does) against `--no-compile` (what it did before).
- `import torch`'s CPU time with the venv's bytecode against without any (PYTHONDONTWRITEBYTECODE=1
  and an empty PYTHONPYCACHEPREFIX: what every process paid where bytecode is never written).
Both with the same wheels (PIP_FIND_LINKS / the index this machine is set up with).
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys

from bench import measure
from bench.harness import row

EXTRAS = ".[demo,test,spy]"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> float:
    before = _children_cpu()
    res = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         timeout=1800)
    if res.returncode != 0:
        raise RuntimeError(f"{measure.shown(cmd)} exited {res.returncode}: {res.stderr.strip()[-300:]}")
    return _children_cpu() - before


def _install(compile_: bool) -> float:
    env = measure.clean_env(PYTHONDONTWRITEBYTECODE="1")
    with measure.scratch("install") as tmp:
        venv = tmp / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
        flags = [] if compile_ else ["--no-compile"]
        return _cpu([str(venv / "bin" / "pip"), "install", "-q", *flags, "-e", EXTRAS], env,
                    cwd=str(measure.ROOT))


def _import_torch(cached: bool) -> float:
    with measure.scratch("pycache") as empty:
        env = measure.clean_env(PYTHONDONTWRITEBYTECODE="1")
        if not cached:
            env["PYTHONPYCACHEPREFIX"] = str(empty)  # an empty cache: nothing read, nothing written
        return _cpu([sys.executable, "-c", "import torch"], env)


def run(quick: bool = False) -> list[dict]:
    reps = 1 if quick else 2
    installs: dict[bool, list[float]] = {True: [], False: []}
    for _, compiled in measure.alternated(reps, [True, False]):
        installs[compiled].append(_install(compiled))
    imports: dict[bool, list[float]] = {True: [], False: []}
    for _, cached in measure.alternated(3 if quick else 7, [True, False]):
        imports[cached].append(_import_torch(cached))
    cmd = f"pip install -e '{EXTRAS}' (fresh venv, PYTHONDONTWRITEBYTECODE=1)"
    per_proc = measure.median(imports[False]) - measure.median(imports[True])
    return [
        row("install CPU: pip compiles vs --no-compile", cmd, measure.median(installs[True]),
            measure.median(installs[False]), alt_name="--no-compile", unit="s",
            note=f"CPU seconds (user+sys of pip and its children), median of {reps} each, alternated; "
                 f"the difference is paid back after {_payback(installs, per_proc)} torch processes"),
        row("`import torch` CPU with bytecode vs without", "python -c 'import torch'",
            measure.median(imports[True]), measure.median(imports[False]), alt_name="no bytecode", unit="s",
            note=f"CPU seconds, median of {len(imports[True])} each, alternated; without: "
                 f"PYTHONDONTWRITEBYTECODE=1 and an empty PYTHONPYCACHEPREFIX (cpu count {os.cpu_count()})"),
    ]


def _payback(installs: dict[bool, list[float]], per_proc: float) -> str:
    extra = (measure.median(installs[True]) or 0) - (measure.median(installs[False]) or 0)
    return "no" if per_proc <= 0 else f"{max(0.0, extra) / per_proc:.0f}"
