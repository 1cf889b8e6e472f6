"""The bench runner: finds bench/bench_*.py, runs each, prints the table, writes BENCHMARKS.md.

A bench module exposes `run(quick: bool = False) -> list[dict]`; each dict is a row made
with `row()`. A module that cannot be imported (a missing dependency) or that raises gives
a row saying so, and the run goes on: one broken benchmark never hides the others.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
DEFAULT_OUTPUT = ROOT / "BENCHMARKS.md"
DATA_MARK = "<!-- bench-data "
FIELDS = ("what", "command", "mpwatch", "alternative", "alt_name", "ratio", "unit", "target", "ok", "note")


def row(what, command="", mpwatch=None, alternative=None, alt_name=None, unit="", target=None,
        ok=None, note="", ratio=None) -> dict:
    """One table row. The ratio is mpwatch / alternative unless given; ok is True/False
    against the target, None where there is no target or nothing was measured."""
    if ratio is None and _num(mpwatch) and _num(alternative) and alternative != 0:
        ratio = mpwatch / alternative
    return {"what": what, "command": command, "mpwatch": mpwatch, "alternative": alternative,
            "alt_name": alt_name, "ratio": ratio, "unit": unit, "target": target, "ok": ok, "note": note}


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def discover() -> dict[str, str]:
    """{short name: module name} for every bench/bench_*.py, in name order."""
    return {p.stem[len("bench_"):]: f"bench.{p.stem}" for p in sorted(BENCH_DIR.glob("bench_*.py"))}


def run_module(name: str, modname: str, quick: bool) -> list[dict]:
    """The module's rows, or one row saying why there are none."""
    try:
        mod = importlib.import_module(modname)
        fn = getattr(mod, "run", None)
        if not callable(fn):
            return [row(f"{name}: no run() in {modname}", note="skipped: the module has no run(quick)")]
        rows = fn(quick=quick)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or str(exc)
        return [row(f"{name}", note=f"skipped: missing dependency {missing}")]
    except Exception as exc:  # noqa: BLE001 - one broken benchmark must not end the run
        traceback.print_exc(file=sys.stderr)
        return [row(f"{name}", note=f"failed: {type(exc).__name__}: {exc}".splitlines()[0][:300])]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        return [row(f"{name}", note=f"failed: run() returned {type(rows).__name__}, not a list of rows")]
    return [{**dict.fromkeys(FIELDS), **r} for r in rows]


# ------------------------------------------------------------------ formatting ----
def fmt_value(v, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v}{' ' + unit if unit else ''}"
    if isinstance(v, float):
        text = f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
        return f"{text}{' ' + unit if unit else ''}"
    return str(v)


def fmt_ratio(r) -> str:
    return "-" if not _num(r) else f"{r:.2f}x"


def fmt_ok(ok) -> str:
    return {True: "met", False: "MISSED", None: "-"}.get(ok, str(ok))


def alt_text(r: dict) -> str:
    if r.get("alternative") is None:
        return "-" if not r.get("alt_name") else f"- ({r['alt_name']})"
    return f"{fmt_value(r['alternative'], r.get('unit') or '')} ({r.get('alt_name') or '?'})"


def print_table(rows: list[dict], out=sys.stdout):
    cols = [("what", 44), ("mpwatch", 14), ("alternative", 30), ("ratio", 7), ("target", 22), ("met", 6)]
    out.write("  ".join(f"{c:<{w}}" for c, w in cols).rstrip() + "\n")
    for r in rows:
        cells = [r["what"] or "", fmt_value(r["mpwatch"], r.get("unit") or ""), alt_text(r),
                 fmt_ratio(r["ratio"]), r.get("target") or "-", fmt_ok(r["ok"])]
        out.write("  ".join(f"{c!s:<{w}}" for c, (_, w) in zip(cells, cols, strict=True)).rstrip() + "\n")
        if r.get("command"):
            out.write(f"    $ {r['command']}\n")
        if r.get("note"):
            out.write(f"    note: {r['note']}\n")
    out.flush()


def _md(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def machine_info() -> dict:
    def version(pkg):
        try:
            return importlib.metadata.version(pkg)  # never import torch just to name it
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        commit = "?"
    return {"cores": os.cpu_count(), "load": os.getloadavg(), "platform": platform.platform(),
            "python": platform.python_version(), "torch": version("torch"), "textual": version("textual"),
            "mpwatch": version("mpwatch"), "commit": commit}


def write_markdown(path: Path, rows: list[dict], info: dict, runs: list[dict]):
    """The table, with the machine and every run that produced its rows (a full run, then
    any `--update` re-runs of single benchmarks); the rows are also kept as JSON in a
    trailing comment so that `--update` can replace some and keep the rest."""
    lines = [
        "# mpwatch benchmarks",
        "",
        "Generated by the bench harness; do not edit by hand. Regenerate with `make bench`",
        "(`python -m bench`). Each figure is a median of several runs with the run order",
        "alternated against the alternative; the machine is shared and noisy, so read the",
        "ratios rather than the absolute times.",
        "",
        f"- machine: {info['cores']} cores; {info['platform']}",
        f"- python {info['python']}, torch {info['torch']}, textual {info['textual']}, "
        f"mpwatch {info['mpwatch']} (commit {info['commit']})",
    ]
    for i, run in enumerate(runs):
        la = " ".join(f"{x:.2f}" for x in run["load_before"])
        lb = " ".join(f"{x:.2f}" for x in run["load_after"])
        what = "command" if i == 0 else "re-run of " + ", ".join(run["benches"])
        lines.append(f"- {what}: `{run['command']}`" + (" (quick mode: smaller sizes, fewer runs; not reference "
                                                          "numbers)" if run.get("quick") else ""))
        lines.append(f"  - {run['date']}; took {run['elapsed']:.0f} s; load average (1, 5, 15 min) {la} before, "
                     f"{lb} after")
    lines += [
        "",
        "| What | Command | mpwatch | Alternative | Ratio | Target | Met | Note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cmd = f"`{_md(r['command'])}`" if r.get("command") else ""
        lines.append("| " + " | ".join([
            _md(r["what"] or ""), cmd, _md(fmt_value(r["mpwatch"], r.get("unit") or "")), _md(alt_text(r)),
            fmt_ratio(r["ratio"]), _md(r.get("target") or "-"), fmt_ok(r["ok"]), _md(r.get("note") or ""),
        ]) + " |")
    data = json.dumps({"runs": runs, "rows": rows}, default=str).replace("--", "\\u002d\\u002d")
    lines += ["", f"{DATA_MARK}{data} -->", ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def read_data(path: Path) -> dict | None:
    """The runs and rows an earlier harness run left in `path`, or None."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    i = text.rfind(DATA_MARK)
    if i < 0:
        return None
    try:
        data = json.loads(text[i + len(DATA_MARK):].rsplit("-->", 1)[0])
    except ValueError:
        return None
    return data if isinstance(data, dict) and "rows" in data and "runs" in data else None


# ------------------------------------------------------------------------ main ----
def parse(argv):
    p = argparse.ArgumentParser(prog="python -m bench", description="Run mpwatch's benchmarks.")
    p.add_argument("--quick", action="store_true", help="smallest sizes and fewest runs (for the test)")
    p.add_argument("--only", nargs="+", action="extend", metavar="NAME", default=[],
                   help="run only these benchmarks (names of bench/bench_NAME.py)")
    p.add_argument("--output", metavar="PATH", default=str(DEFAULT_OUTPUT),
                   help="where to write the table (default: BENCHMARKS.md at the repository root)")
    p.add_argument("--update", action="store_true",
                   help="replace only the rows of the benchmarks run now, keep the others in the output file")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ns = parse(argv)
    found = discover()
    if ns.list:
        print("\n".join(found))
        return 0
    unknown = [n for n in ns.only if n not in found]
    if unknown:
        print(f"bench: error: no benchmark named {', '.join(unknown)} (have: {', '.join(found)})", file=sys.stderr)
        return 2
    names = ns.only or list(found)
    out = Path(ns.output)
    old = read_data(out) if ns.update else None
    if ns.update and old is None and out.exists():
        print(f"bench: error: cannot --update {out}: it holds no bench data; run the full bench", file=sys.stderr)
        return 2
    command = shlex.join(["python", "-m", "bench", *argv])
    info = machine_info()
    started = time.time()
    print(f"# {command}: {len(names)} benchmark(s) on {info['cores']} cores, load "
          f"{' '.join(f'{x:.2f}' for x in info['load'])}", flush=True)
    rows: list[dict] = []
    for name in names:
        t0 = time.monotonic()
        print(f"== {name} ...", flush=True)
        got = run_module(name, found[name], ns.quick)
        print_table(got)
        print(f"   ({name} took {time.monotonic() - t0:.1f} s)", flush=True)
        for r in got:
            r["bench"] = name
        rows.extend(got)
    runs = [{"command": command, "benches": names, "quick": ns.quick, "elapsed": time.time() - started,
             "date": _dt.datetime.fromtimestamp(started).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z"),
             "load_before": list(info["load"]), "load_after": list(os.getloadavg())}]
    if old is not None:
        order = {name: i for i, name in enumerate(found)}
        kept = [r for r in old["rows"] if r.get("bench") not in names]
        rows = sorted(kept + rows, key=lambda r: order.get(r.get("bench"), len(order)))  # stable
        runs = old["runs"] + runs
    print("\n# all results")
    print_table(rows)
    write_markdown(out, rows, info, runs)
    print(f"# wrote {out}")
    return 0
