"""Adding a GPU counter is the files docs/architecture.md lists (issue 38): the fan speed is added
to a copy of the package, editing only those files, and that copy, run on its own, shows it in
every view: the sample (through the scripted NVML, and through the real backend on the C stand-in
built from the copy), the supervisor's view of it, `ctl status`, the GPU panel, the GPU screen,
its N/A words, and a replay (which reads N/A: gpu.jsonl does not keep it); and the copy holds
together (the counter is a GpuSample field and a GpuView key, the status fits the schema). The
walk-through must list exactly the files this test edits, and each of them is needed: without
any one of the edits the copy fails the check."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpwatch.testing.libnvml import build
from tests.helpers import ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"
SECTION = "### A GPU counter"


def documented_files() -> list[str]:
    """The numbered files of the walk-through's list."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/architecture.md has no {SECTION!r}"
    part = text.split(SECTION, 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\d+\. `(mpwatch/[^`]+)`", part, re.M)


def _insert(after: str, text: str):
    """An edit: `text` put after the first line holding `after`."""
    def edit(source: str) -> str:
        lines = source.splitlines(keepends=True)
        at = next((i for i, ln in enumerate(lines) if after in ln), None)
        assert at is not None, f"no line holds {after!r}: this test's edit needs the file's new shape"
        return "".join(lines[:at + 1]) + text + "".join(lines[at + 1:])
    return edit


def _before(marker: str, text: str):
    """An edit: `text` put before the first `marker`."""
    def edit(source: str) -> str:
        assert marker in source, f"no {marker!r}: this test's edit needs the file's new shape"
        return source.replace(marker, text + marker, 1)
    return edit


# The fan speed, file by file, as the walk-through says.
EDITS = {
    "mpwatch/contract/gpu_counters.py": _before(")\nBY_KEY", (
        '    GpuCounter("fan_speed", NvmlCall("nvmlDeviceGetFanSpeed"), "fan", "fan speed", label="fan",\n'
        '               unit="%", width=7),\n')),
    "mpwatch/contract/gpu_view.py": _insert("sm_clock_max_mhz: NotRequired",
                                            "    fan_speed: NotRequired[int | None]\n"),
    "mpwatch/probes/gpu_sample.py": _insert("sm_clock_max_mhz: int | None",
                                            "    fan_speed: int | None = None\n"),
    "mpwatch/testing/libnvml/stand_in_counters.c": lambda s: s + (
        "\nEXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed) {\n"
        '    return one(device, "fan_speed", speed);\n}\n'),
}

# Run with the copy first on the path (the tests package after it): what each view shows of
# the fan speed, and whether the copy holds together.
SHOW = r"""
import dataclasses, json, os, sys
from pathlib import Path
copy, status_file, run_dir, lib = sys.argv[1:5]
import mpwatch
assert mpwatch.__file__.startswith(copy), mpwatch.__file__
from mpwatch.cli.status_text import status_lines
from mpwatch.contract import status
from mpwatch.contract.gpu_counters import COUNTERS
from mpwatch.probes import gpu
from mpwatch.probes.gpu_sample import GpuSample
from mpwatch.sources.replay.source import ReplaySource
from mpwatch.supervisor.gpu.views import Views
from mpwatch.testing.libnvml import SCRIPT_ENV
from mpwatch.testing.libnvml.script import write_script
from mpwatch.tui.render import gpu_rows, gpu_tables
from mpwatch.tui.render.glyphs import UNICODE
from tests.schema import problems

def sample(frame, scripted):
    path = os.path.join(os.path.dirname(status_file), "scenario.json")
    data = {"gpus": [{"name": "Fake 80G", "mem_total": 80 << 30}], "frames": [{"gpus": [frame]}]}
    with open(path, "w") as f:
        json.dump(data, f)
    if not scripted:
        os.environ[SCRIPT_ENV] = str(write_script(path, Path(path + ".txt")))
    backend, why = gpu.open_backend(path if scripted else None)
    assert why is None, why
    probe = gpu.GpuProbe(backend)
    probe.open()
    (s,) = probe.sample(with_processes=True)
    probe.close()
    return getattr(s, "fan_speed", None), s

def text(line):
    return "".join(seg for seg, _ in line)

def shown(st):
    view = st["gpus"][0]
    return {"ctl": [ln.strip() for ln in status_lines(st)],
            "panel": [text(ln) for ln in gpu_rows.gpu_rows(st, UNICODE, 160)],
            "heading": text(gpu_tables.gpu_heading(view, UNICODE)),
            "notes": [text(ln) for ln in gpu_tables.gpu_notes(view)],
            "schema": problems(st, status.Status)}

out = {"no_field": [c.key for c in COUNTERS if c.key not in {f.name for f in dataclasses.fields(GpuSample)}],
       "no_key": [c.key for c in COUNTERS if c.key not in status.GpuView.__annotations__]}
out["scripted"], s = sample({"fan_speed": 45, "temperature": 61}, scripted=True)
if lib != "-":
    out["libnvml"] = sample({"fan_speed": 45, "temperature": 61}, scripted=False)[0]
view = Views().view(s, {}, {})
out["view"] = view.get("fan_speed")
with open(status_file) as f:
    st = json.load(f)["status"]
st["gpus"] = [view]
out["live"] = shown(st)
st["gpus"] = [Views().view(sample({"fail": ["fan:NOT_SUPPORTED"]}, scripted=True)[1], {}, {})]
out["failed"] = shown(st)
replay = ReplaySource(run_dir)
assert replay.move("step", -1)  # a moment rebuilt from the run's files, not its final status
out["replay"] = shown(replay.status())
print(json.dumps(out))
"""
RUN_DIR = ROOT / "tests" / "cli" / "data" / "oom-gpu"  # a recorded run with gpu.jsonl
STATUS = ROOT / "tests" / "data" / "statuses" / "gpu2.json"  # a recorded status with its GPUs


def _copy(tmp_path: Path, edits: dict) -> Path:
    """A copy of the package with the fan speed added by `edits`."""
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "mpwatch", copy / "mpwatch", ignore=shutil.ignore_patterns("__pycache__"))
    for rel, edit in edits.items():
        path = copy / rel
        path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    return copy


def _run(copy: Path, code: str, *args: str, env: dict[str, str] | None = None) -> str:
    env = dict(os.environ if env is None else env, PYTHONPATH=f"{copy}{os.pathsep}{ROOT}",
               PYTHONDONTWRITEBYTECODE="1")
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                         cwd=copy, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _shown(copy: Path, tmp_path: Path) -> dict:
    """What the copy's views show (the C stand-in's part where it can be built here)."""
    env = {k: v for k, v in os.environ.items() if k != "MPWATCH_SCRIPTED_NVML"}
    lib = "-"
    if build.missing() is None:  # the C stand-in built from the copy: its NVML call answered there
        lib = _run(copy, "import sys; from pathlib import Path; from mpwatch.testing.libnvml import build; "
                         "print(build.build(Path(sys.argv[1])))", str(tmp_path / "lib")).strip()
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    shutil.copy(STATUS, tmp_path / "status.json")
    out = json.loads(_run(copy, SHOW, str(copy), str(tmp_path / "status.json"), str(RUN_DIR), lib, env=env))
    out["built"] = lib != "-"
    return out


def check(out: dict) -> None:
    """Every view shows the fan speed, and the copy holds together."""
    assert out["no_field"] == [] and out["no_key"] == []
    assert out["scripted"] == 45 and out["view"] == 45
    if out["built"]:
        assert out["libnvml"] == 45
    live = out["live"]
    assert live["schema"] == []
    assert any(ln.startswith("GPU 0: Fake 80G") and " · 61C · 50W · fan 45% · SM 1410/1410 MHz" in ln
               for ln in live["ctl"])
    assert " 61C   50W fan 45% " in live["panel"][0]
    assert "  61C  50W  fan 45%  Fake 80G" in live["heading"]
    failed = out["failed"]
    assert "fan N/A" in failed["heading"] and "fan N/A" in failed["panel"][0]
    assert "fan speed: not supported on this GPU or driver" in failed["ctl"]
    assert any("fan speed: not supported" in ln for ln in failed["notes"])
    replay = out["replay"]
    assert "fan N/A" in replay["heading"] and "fan N/A" in replay["panel"][0]
    assert any(ln.startswith("GPU 0:") and ln.endswith("· fan N/A") for ln in replay["ctl"])


def test_the_walk_through_lists_the_files_a_counter_touches():
    files = documented_files()
    assert sorted(files) == sorted(EDITS), (
        f"the walk-through lists {files}; adding a counter here edits {sorted(EDITS)}")
    assert len(files) <= 5  # issue 38: a new NVML counter touches at most 5 files
    assert all((ROOT / f).is_file() for f in files)


def test_a_counter_added_in_the_documented_files_shows_in_every_view(tmp_path):
    check(_shown(_copy(tmp_path, EDITS), tmp_path))


@pytest.mark.parametrize("left_out", sorted(EDITS))
def test_each_documented_file_is_needed(tmp_path, left_out):
    """The check can fail: the fan speed added in every documented file but one."""
    if left_out.endswith(".c") and build.missing():
        pytest.skip(build.missing())
    copy = _copy(tmp_path, {rel: edit for rel, edit in EDITS.items() if rel != left_out})
    with pytest.raises(AssertionError):
        check(_shown(copy, tmp_path))
