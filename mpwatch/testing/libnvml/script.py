"""TEST-ONLY: a scripted-NVML scenario (the JSON probes.nvml_scripted reads) as the line
script the stand-in libnvidia-ml.so.1 reads (format in testing.libnvml's script.c), and the
environment that makes a process load that library. Runs in the test process.

The values mean what they mean to probes.nvml_scripted: the same defaults, memory used as the
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
- `"reserved"`: the driver's share of a GPU's memory (nvmlDeviceGetMemoryInfo_v2's `reserved`;
  v1 counts it in `used`); `"sm_clock"`, `"sm_clock_max"` (MHz, default 1410 both); `"throttle"`:
  the clock event reasons (contract.gpu_view.ThrottleReason names). `fail` keys "memory_v2",
  "clocks", "throttle" fail those alone.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pynvml

from mpwatch.probes.gpu_reads import reason_mask
from mpwatch.settings import SCRIPTED_NVML_ENV
from mpwatch.testing.libnvml import SCRIPT_ENV

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


def _dev_lines(g: dict[str, object]) -> list[str]:
    procs = [_obj(p) for p in _list(g.get("processes"))]
    power = g.get("power_w", 50.0)
    power_mw = round(float(power) * 1000) if isinstance(power, (int, float)) else 50000
    clock_max = _int(g.get("sm_clock_max"), 1410)
    reasons = reason_mask([str(r) for r in _list(g.get("throttle"))])
    out = ["\t".join(str(v) for v in (
        "dev", _int(g.get("util_gpu")), _int(g.get("util_mem")), _int(g.get("temperature"), 40),
        max(power_mw, 0), _used(g, procs), "0" if g.get("proc_util") is False else "1",
        max(_int(g.get("reserved")), 0), _int(g.get("sm_clock"), clock_max), clock_max, reasons))]
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
    for i, g in enumerate(_obj(x) for x in _list(data.get("gpus"))):
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
        for dev in _list(fr.get("gpus")):
            lines += _dev_lines(_obj(dev))
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
