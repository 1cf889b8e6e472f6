"""The MPWATCH_* switches (mpwatch.settings): read once, checked, one home for each name;
the "Settings" table of docs/settings.md matches them (issue 18). The command line's side of a bad value
(one line, exit code 2) is in tests/faults/test_cli_bad.py."""
from __future__ import annotations

import ast
import dataclasses
import itertools
import re
from pathlib import Path

import pytest

from mpwatch import settings as settings_mod
from mpwatch.contract import protocol
from mpwatch.settings import SWITCHES, GpuThresholds, Settings, SettingsError
from mpwatch.testing.libnvml import SCRIPT_ENV
from mpwatch.worker import seam as worker_seam
from tests.helpers import ROOT
from tests.manual import pages, section

PACKAGE = ROOT / "mpwatch"
VAR = re.compile(r"MPWATCH_[A-Z0-9_]*[A-Z0-9]")
# The worker side's own variables: set by the supervisor for each worker (contract.protocol),
# and the GPU seam's scenario a test gives the workers (worker.seam); read by the worker, never settings.
WORKER_SIDE = {v for k, v in vars(protocol).items() if k.startswith("ENV_")} | {worker_seam.SCRIPTED_CUDA_ENV}


def test_defaults_are_the_contract():
    s = Settings.from_env({})
    assert s == Settings()
    assert (s.events_mb, s.gpu_timeline_mb, s.node_lost_s) == (128, 64, 10)
    assert (s.pyspy, s.nccl_flight, s.ssh, s.ascii) == ("stall", False, ("ssh",), False)
    assert (s.tmpdir, s.strict_states, s.scripted_nvml, s.auto) == (Path("/tmp"), False, None, True)
    assert s.gpu == GpuThresholds() and s.gpu.mem_high == 0.9 and s.gpu.frag_min == 1 << 30


def test_values_are_parsed():
    s = Settings.from_env({
        "MPWATCH_EVENTS_MB": "2", "MPWATCH_GPU_TIMELINE_MB": "0.004", "MPWATCH_NODE_LOST_S": "3.5",
        "MPWATCH_PYSPY": "Always", "MPWATCH_NCCL_FLIGHT": "yes", "MPWATCH_SSH": "ssh -F '/my dir/cfg'",
        "MPWATCH_ASCII": "1", "MPWATCH_TMPDIR": "/var/tmp", "MPWATCH_STRICT_STATES": "1",
        "MPWATCH_SCRIPTED_NVML": "/no/such.json",  # a scenario that is missing is the GPU watcher's to say
        "MPWATCH_GPU_MEM_ALERT": "85", "MPWATCH_GPU_OUTSIDE": "0.1", "MPWATCH_GPU_IDLE_S": "5",
        "MPWATCH_GPU_IDLE_UTIL": "0", "MPWATCH_GPU_RETRIES": "3", "MPWATCH_GPU_COOLDOWN_S": "0",
        "MPWATCH_AUTO": "off",
    })
    assert s.auto is False
    assert (s.events_mb, s.gpu_timeline_mb, s.node_lost_s, s.pyspy) == (2, 0.004, 3.5, "always")
    assert s.nccl_flight is True
    assert s.ssh == ("ssh", "-F", "/my dir/cfg") and s.ascii and s.strict_states
    assert s.tmpdir == Path("/var/tmp")
    assert s.scripted_nvml == "/no/such.json"
    g = s.gpu
    assert (g.mem_high, g.outside, g.idle_s, g.idle_util, g.retries, g.cooldown_s) == (0.85, 0.1, 5, 0, 3, 0)
    assert g.busy_util == 75 and g.frag == 0.25  # the others keep their defaults


def test_a_variable_set_to_nothing_is_unset():
    assert Settings.from_env({var: "" for var in SWITCHES}) == Settings()
    assert Settings.from_env({"MPWATCH_SSH": "  ", "MPWATCH_ASCII": ""}) == Settings()


BAD = [
    ("MPWATCH_EVENTS_MB", "inf", "not a finite number"),
    ("MPWATCH_EVENTS_MB", "1e400", "not a finite number"),
    ("MPWATCH_EVENTS_MB", "abc", "not a number"),
    ("MPWATCH_EVENTS_MB", "nan", "not a finite number"),
    ("MPWATCH_EVENTS_MB", "0", "a number of MB above 0"),
    ("MPWATCH_EVENTS_MB", "-3", "a number of MB above 0"),
    ("MPWATCH_GPU_TIMELINE_MB", "inf", "not a finite number"),
    ("MPWATCH_GPU_TIMELINE_MB", "junk", "not a number"),
    ("MPWATCH_NODE_LOST_S", "abc", "not a number"),
    ("MPWATCH_NODE_LOST_S", "-1", "a number of seconds above 0"),
    ("MPWATCH_SSH", "ssh -o 'x", "not a command line (no closing quotation)"),
    ("MPWATCH_SSH", "''", "an empty command"),
    ("MPWATCH_PYSPY", "sometimes", "stall, always or off"),
    ("MPWATCH_NCCL_FLIGHT", "please", "1 or 0"),
    ("MPWATCH_ASCII", "x", "1 or 0"),
    ("MPWATCH_AUTO", "maybe", "1 or 0"),
    ("MPWATCH_TMPDIR", "tmp", "an absolute path"),
    ("MPWATCH_GPU_MEM_ALERT", "lots", "not a number"),
    ("MPWATCH_GPU_MEM_ALERT", "250", "a fraction (0.9) or a percentage (90)"),
    ("MPWATCH_GPU_MEM_ALERT", "0", "a fraction (0.9) or a percentage (90)"),
    ("MPWATCH_GPU_IDLE_S", "-1", "a number of seconds above 0"),
    ("MPWATCH_GPU_BUSY_UTIL", "x", "not a number"),
    ("MPWATCH_GPU_BUSY_UTIL", "101", "a percentage, at most 100"),
    ("MPWATCH_GPU_IDLE_UTIL", "-1", "a percentage, at least 0"),
    ("MPWATCH_GPU_COOLDOWN_S", "-5", "a number of seconds, at least 0"),
    ("MPWATCH_NODE_LOST_S", "1e9", "a number of seconds, at most 10000000"),
]


@pytest.mark.parametrize("var,value,why", BAD, ids=[f"{v}={x}" for v, x, _ in BAD])
def test_a_bad_value_is_one_line_naming_it(var, value, why):
    with pytest.raises(SettingsError) as err:
        Settings.from_env({var: value})
    assert str(err.value).startswith(f"{var}={value}: {why}"), str(err.value)


def test_the_value_shown_is_printable_and_bounded():
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"MPWATCH_EVENTS_MB": "\x1b[31m" + "9" * 500})
    line = str(err.value)
    assert "\x1b" not in line and len(line) < 150 and "\n" not in line


def test_every_field_has_exactly_one_switch():
    names = sorted(name for name, _ in SWITCHES.values())
    want = sorted([f.name for f in dataclasses.fields(Settings) if f.name != "gpu"]
                  + [f"gpu.{f.name}" for f in dataclasses.fields(GpuThresholds)])
    assert names == want


def documented_defaults() -> dict[str, str]:
    """VAR -> the default its field's docstring line gives: `MPWATCH_X (default): what`."""
    tree = ast.parse(Path(settings_mod.__file__).read_text())
    out: dict[str, str] = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        body = cls.body
        for field, doc in itertools.pairwise(body):
            if isinstance(field, ast.AnnAssign) and isinstance(doc, ast.Expr) \
                    and isinstance(doc.value, ast.Constant):
                m = re.match(r"(MPWATCH_[A-Z0-9_]+) \(([^)]*)\): \S", doc.value.value)
                if m:
                    assert m.group(1) not in out, f"{m.group(1)} documented twice"
                    out[m.group(1)] = m.group(2)
    return out


def test_every_switch_has_a_docstring_line_with_its_default():
    assert set(documented_defaults()) == set(SWITCHES)


def documented_settings() -> tuple[dict[str, str], str]:
    """The "Settings" page (docs/settings.md): its table (VAR -> default) and its whole text."""
    text = section("docs/settings.md", "Settings")
    table = {}
    for row in re.findall(r"^\| `(MPWATCH_[A-Z0-9_]+)` \| ([^|]*) \|", text, re.M):
        assert row[0] not in table, f"{row[0]} twice in the settings table"
        table[row[0]] = row[1].strip().strip("`")
    return table, text


def test_the_settings_table_lists_every_switch_with_its_default():
    table, _ = documented_settings()
    assert set(table) == set(SWITCHES), ("missing from docs/settings.md:", set(SWITCHES) - set(table),
                                         "not a setting:", set(table) - set(SWITCHES))
    assert table == documented_defaults()


def test_the_manual_names_only_variables_that_exist_and_lists_the_worker_side_apart():
    table, text = documented_settings()
    mentioned = {v for page in pages() for v in VAR.findall(page.read_text())}
    stand_ins = {SCRIPT_ENV}  # testing.libnvml's script, read by its C library only
    assert mentioned <= set(SWITCHES) | WORKER_SIDE | stand_ins, mentioned - set(SWITCHES) - WORKER_SIDE
    assert not WORKER_SIDE & set(table)
    in_section = set(VAR.findall(text))
    assert in_section >= WORKER_SIDE, WORKER_SIDE - in_section


def code_strings(path: Path) -> set[str]:
    """The MPWATCH_ names a module spells in its code (docstrings left out)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
            and n.value.startswith("MPWATCH_")}


def test_mpwatch_variables_are_spelled_in_four_modules_at_most():
    """settings (the switches), contract.protocol (the worker side's names), and the worker
    side that reads its own: the worker's GPU seam and the start-up hook."""
    spelled = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if code_strings(p)}
    allowed = {"settings.py", "contract/protocol.py", "worker/seam.py", "worker/boot/sitecustomize.py",
               "worker/boot/forkserver.py",  # loaded by file, importing nothing of mpwatch: a copy
               "testing/libnvml/__init__.py"}  # the C stand-in's script: written for C, never read here
    assert spelled <= allowed, spelled


def test_the_start_up_hook_reads_the_protocols_names():
    # sitecustomize imports nothing of mpwatch (it runs in every worker process): its names are copies
    hook = code_strings(PACKAGE / "worker" / "boot" / "sitecustomize.py")
    assert hook == {protocol.ENV_STACK_FILE, protocol.ENV_SUPERVISOR_PID, protocol.ENV_AUTO, protocol.ENV_CUDA_OOM,
                    protocol.ENV_CUDA_HISTORY, protocol.ENV_HOOK_ONLY}


def test_the_forkservers_name_is_the_protocols():
    # worker.boot.forkserver is loaded by file before anything of mpwatch: its name is a copy
    assert code_strings(PACKAGE / "worker" / "boot" / "forkserver.py") - {"MPWATCH_"} == {protocol.ENV_FORKSERVER_PAD}


def test_the_settings_are_read_once_by_the_command_line_and_handed_in():
    """Settings.from_env() is called by cli.main alone: every room is handed the settings (the
    supervisor's rooms, the registry's tmpdir, the TUI's glyphs, the ssh transport)."""
    readers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "from_env" and path.name != "settings.py":
                readers.add(str(path.relative_to(PACKAGE)))
    assert readers == {"cli/__init__.py"}
