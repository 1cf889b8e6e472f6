"""The bench harness at its smallest size, so it cannot rot. Not a timing test: it checks
that the harness runs a real benchmark end to end and writes the table, and that a broken
or dependency-less benchmark becomes a row instead of ending the run."""
from __future__ import annotations

import subprocess
import sys

from bench import bench_report, harness
from tests.helpers import ROOT


def bench(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "bench", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_quick_report_bench_writes_the_table(tmp_path):
    out = tmp_path / "BENCH.md"
    res = bench("--quick", "--only", "report", "--output", out)
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert f"- command: `python -m bench --quick --only report --output {out}`" in text
    assert "- machine: " in text and " cores;" in text and "load average (1, 5, 15 min)" in text
    assert "python " in text and "torch " in text
    data = harness.read_data(out)["rows"]
    assert [r["bench"] for r in data] == ["report"] * 3
    assert "| What | Command | mpwatch | Alternative | Ratio | Target | Met | Note |" in text
    rows = [line for line in text.splitlines() if line.startswith("| report() per call")]
    assert len(rows) == 3, text
    under = rows[0].split(" | ")
    assert "under mpwatch" in under[0] and under[2].endswith("µs") and under[4].endswith("x"), under
    # Met is what the row's own number says against its target (whichever way this box measured):
    # CPU under mpwatch at most TARGET_US, the no-op outside under OUTSIDE_TARGET_US, the wall clock
    # row without a target
    cpu, wall, outside = data
    assert under[6] == ("met" if cpu["mpwatch"] <= bench_report.TARGET_US else "MISSED"), (under, cpu)
    assert rows[1].split(" | ")[6] == "-" and wall["target"] is None
    assert rows[2].split(" | ")[6] == ("met" if outside["mpwatch"] < bench_report.OUTSIDE_TARGET_US else "MISSED")
    assert "report() per call, under mpwatch" in res.stdout  # the table is printed too


def test_unknown_benchmark_is_a_one_line_error(tmp_path):
    res = bench("--only", "no_such_bench", "--output", tmp_path / "x.md", timeout=60)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "no_such_bench" in res.stderr
    assert not (tmp_path / "x.md").exists()


def test_discovery_finds_the_benchmark_modules():
    found = harness.discover()
    assert {"launch", "report", "scale", "stop", "help"} <= set(found)
    assert all(mod == f"bench.bench_{name}" for name, mod in found.items())


def test_missing_dependency_or_exception_becomes_a_row(tmp_path, monkeypatch):
    (tmp_path / "fakebench_raises.py").write_text("def run(quick=False):\n    raise RuntimeError('boom')\n")
    (tmp_path / "fakebench_needs.py").write_text("import no_such_dependency_xyz\ndef run(quick=False):\n"
                                                 "    return []\n")
    (tmp_path / "fakebench_ok.py").write_text(
        "from bench.harness import row\ndef run(quick=False):\n"
        "    return [row('thing', 'cmd', 1.0, 2.0, alt_name='other', unit='s', target='x', ok=True)]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    [raised] = harness.run_module("raises", "fakebench_raises", quick=True)
    assert raised["note"] == "failed: RuntimeError: boom" and raised["mpwatch"] is None
    [missing] = harness.run_module("needs", "fakebench_needs", quick=True)
    assert missing["note"] == "skipped: missing dependency no_such_dependency_xyz"
    [ok] = harness.run_module("ok", "fakebench_ok", quick=True)
    assert ok["ratio"] == 0.5 and set(ok) == set(harness.FIELDS)
    out = tmp_path / "t.md"
    run = {"command": "python -m bench", "benches": ["raises", "needs", "ok"], "quick": True, "elapsed": 1.0,
           "date": "today", "load_before": [0.0] * 3, "load_after": [0.0] * 3}
    harness.write_markdown(out, [raised, missing, ok], harness.machine_info(), [run])
    text = out.read_text()
    assert harness.read_data(out)["rows"][2]["ratio"] == 0.5
    assert "failed: RuntimeError: boom" in text and "missing dependency no_such_dependency_xyz" in text
    assert "| thing | `cmd` | 1 s | 2 s (other) | 0.50x | x | met |" in text
