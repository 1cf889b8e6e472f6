"""TEST-ONLY: a scripted-NVML scenario (the JSON testing.nvml reads) as the line
script the stand-in libnvidia-ml.so.1 reads (format in testing.libnvml's script.c), and the
environment that makes a process load that library. Runs in the test process.

The values mean what they mean to testing.nvml: the same defaults, memory used as the
sum of the processes' plus `extra_used` unless `mem_used` is given, pid names ("rank:N",
"rank:N/child", "parent", "self") resolved by the library at each call. What only a driver can
say is said in NVML's own terms: a process's `"mem": null` is NVML_VALUE_NOT_AVAILABLE;
`"proc_util": false` is NVML_ERROR_NOT_SUPPORTED; a `fail` entry "what" is NVML_ERROR_UNKNOWN
and "what:CODE" is NVML_ERROR_<CODE> (e.g. "utilization:NOT_SUPPORTED"; "processes_v3:..."
fails the _v3 process list only); an `init_error` naming an NVML error ("DRIVER_NOT_LOADED")
fails nvmlInit with it, other text with NVML_ERROR_UNKNOWN.

Both stand-ins play these alike (tests/probes/test_scripted_parity.py); the Python one says a
bare "what" failure in words of its own, and has no _v3 list to fail apart nor NVML codes for
`init_error`:
- MIG: a GPU's `"mig": [...]` makes it MIG-capable with those MIG devices, in MIG mode when
  there is one (a GPU without the key answers NOT_SUPPORTED to MIG queries). Each is a UUID, or
  {"uuid", "gi", "ci", "profile": "3g.40gb", "mem_total"} (defaults: gi = its place + 1, ci 0,
  1g.10gb, an eighth of the GPU). A frame's GPU then has `"slices": [...]`, one per MIG
  device in that order, each like a GPU's (`processes`, `mem_used` or `extra_used`, `reserved`,
  `fail`). The GPU lists every slice's processes with their instance ids, and answers memory
  (its slices' sum) and processes to root only: another user gets NO_PERMISSION, reads each
  slice's own, and sees another user's process memory as NVML_VALUE_NOT_AVAILABLE.
  Utilization and process samples are NOT_SUPPORTED in MIG mode.
- The counters (contract.gpu_counters): each by its key, or the name and default
  testing.nvml gives it (`"sm_clock"`, `"sm_clock_max"`: MHz, default 1410 both), is
  answered by the NVML call stand_in_counters.c has for it; `fail` names its reading ("power",
  "clocks"). `"reserved"`: the driver's share of a GPU's memory (nvmlDeviceGetMemoryInfo_v2's
  `reserved`; v1 counts it in `used`); `"throttle"`: the clock event reasons
  (contract.gpu_view.ThrottleReason names). `fail` keys "memory_v2", "throttle" fail those alone.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pynvml

from mpwatch.contract import COUNTERS, GpuCounter
from mpwatch.probes.gpu_reads import reason_mask
from mpwatch.settings import SCRIPTED_NVML_ENV
from mpwatch.testing.libnvml import SCRIPT_ENV
from mpwatch.testing.nvml import counter_value

TEXT_MAX = 95  # NVML's 96-byte name and UUID buffers


def _int(v: object, default: int = 0) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


def _list(v: object) -> list[object]:
    return list(v) if isinstance(v, list) else []


def _obj(v: object) -> dict[str, object]:
    return v if isinstance(v, dict) else {}


def _text(v: object) -> str:
    s = " ".join(str(v).split())  # no tab or newline inside a field
    return s.encode()[:TEXT_MAX].decode(errors="ignore")


def nvml_code(name: str) -> int:
    """An NVML error's number from its name ("NOT_SUPPORTED"); NVML_ERROR_UNKNOWN otherwise."""
    code = getattr(pynvml, "NVML_ERROR_" + name.strip().upper().removeprefix("NVML_ERROR_"), None)
    return code if isinstance(code, int) else int(pynvml.NVML_ERROR_UNKNOWN)


def _pid_spec(v: object) -> str | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return _text(v)[:39] if isinstance(v, str) else None


def _opt(v: object) -> str:
    return "-" if v is None else str(max(_int(v), 0))


def _used(g: dict[str, object], procs: list[dict[str, object]]) -> int:
    used = g.get("mem_used")
    if used is not None:
        return max(_int(used), 0)
    return max(sum(_int(p.get("mem")) for p in procs) + _int(g.get("extra_used")), 0)


def _fail_and_procs(g: dict[str, object], procs: list[dict[str, object]]) -> list[str]:
    out = []
    for f in _list(g.get("fail")):
        what, _, code = str(f).partition(":")
        out.append(f"fail\t{_text(what)}\t{nvml_code(code) if code else pynvml.NVML_ERROR_UNKNOWN}")
    for p in procs:
        spec = _pid_spec(p.get("pid"))
        if spec:
            out.append(f"proc\t{spec}\t{_opt(p.get('mem'))}\t{_opt(p.get('sm'))}")
    return out


def _raw(g: dict[str, object], c: GpuCounter) -> int:
    """A counter's value in a frame's GPU as NVML gives it (milliwatts, whole numbers)."""
    v = counter_value(g, c)
    return max(round(v * c.nvml.per) if c.digits is not None else int(v) * c.nvml.per, 0)


def _counter_lines(g: dict[str, object], mig_mode: bool) -> list[str]:
    """Every counter of a GPU: its value, and its query's scripted failure (a GPU in MIG mode
    does not report those MIG does not: NOT_SUPPORTED)."""
    fails: dict[str, int] = {}
    for f in _list(g.get("fail")):
        what, _, code = str(f).partition(":")
        fails.setdefault(what, nvml_code(code) if code else int(pynvml.NVML_ERROR_UNKNOWN))
    unreported = int(pynvml.NVML_ERROR_NOT_SUPPORTED)
    ends = {c.key: fails.get(c.what, unreported if mig_mode and not c.on_mig else 0) for c in COUNTERS}
    return [f"counter\t{c.key}\t{_raw(g, c)}\t{ends[c.key]}" for c in COUNTERS]


def _dev_lines(g: dict[str, object], mig_mode: bool) -> list[str]:
    procs = [_obj(p) for p in _list(g.get("processes"))]
    reasons = reason_mask([str(r) for r in _list(g.get("throttle"))])
    out = ["\t".join(str(v) for v in (
        "dev", _used(g, procs), "0" if g.get("proc_util") is False else "1", max(_int(g.get("reserved")), 0),
        reasons))]
    out += _counter_lines(g, mig_mode)
    out += _fail_and_procs(g, procs)
    for sl in (_obj(x) for x in _list(g.get("slices"))):
        sprocs = [_obj(p) for p in _list(sl.get("processes"))]
        out.append(f"slice\t{_used(sl, sprocs)}\t{max(_int(sl.get('reserved')), 0)}")
        out += _fail_and_procs(sl, sprocs)
    return out


def _mig_line(i: int, m: object, gpu_total: int) -> str:
    mo = _obj(m) if isinstance(m, dict) else {"uuid": m}
    return "\t".join(str(v) for v in (
        "mig", _text(mo.get("uuid", f"MIG-fake-{i}")), _int(mo.get("gi"), i + 1), _int(mo.get("ci")),
        _text(mo.get("profile", "1g.10gb"))[:31], _int(mo.get("mem_total"), gpu_total // 8)))


def script_text(data: object) -> str:
    """The line script of a scenario; ValueError if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("gpus", []), list):
        raise ValueError("the top level must be an object with a 'gpus' list")
    lines = ["mpwatch-nvml-stand-in 1"]
    if data.get("init_error"):
        lines.append(f"init\t{nvml_code(str(data['init_error']))}")
    lines += [f"default\t{c.key}\t{_raw({}, c)}" for c in COUNTERS]
    gpus = [_obj(x) for x in _list(data.get("gpus"))]
    for i, g in enumerate(gpus):
        lines.append("\t".join(["gpu", _text(g.get("name", f"Fake GPU {i}")),
                                _text(g.get("uuid", f"GPU-fake-{i}")),
                                str(_int(g.get("mem_total"), 16 << 30)), "1" if "mig" in g else "0"]))
        total = _int(g.get("mem_total"), 16 << 30)
        lines += [_mig_line(k, m, total) for k, m in enumerate(_list(g.get("mig")))]
    for fr in (_obj(x) for x in _list(data.get("frames"))):
        at = fr.get("at", 0)
        if not isinstance(at, (int, float)):
            continue  # never current for the Python stand-in either
        lines.append(f"frame\t{float(at)!r}")
        for i, dev in enumerate(_list(fr.get("gpus"))):
            lines += _dev_lines(_obj(dev), i < len(gpus) and bool(_list(gpus[i].get("mig"))))
    return "\n".join(lines) + "\n"


def write_script(scenario: object, path: Path) -> Path:
    """Write the script of a scenario (its data, or the path of its JSON file) to path."""
    if isinstance(scenario, (str, Path)):
        scenario = json.loads(Path(scenario).read_text(encoding="utf-8"))
    path.write_text(script_text(scenario), encoding="utf-8")
    return path


def env_for(lib_dir: Path, script: Path, base: Mapping[str, str]) -> dict[str, str]:
    """`base` changed so that a process started with it loads the stand-in library and plays
    `script` (and not the Python stand-in, MPWATCH_SCRIPTED_NVML)."""
    env = {k: v for k, v in base.items() if k != SCRIPTED_NVML_ENV}
    ld = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = f"{lib_dir}:{ld}" if ld else str(lib_dir)
    env[SCRIPT_ENV] = str(script)
    return env
