"""Every MPWATCH_* switch of the `mpwatch` command, read once and checked: `Settings`.

The command line's entry (cli.main) reads them with `Settings.from_env()` before it runs a
command, so a bad value is one line and exit code 2 (`SettingsError`), never a traceback
later; the command hands the settings to the rooms that use them (supervisor.core.Run to
its rooms, the registry's tmpdir, the TUI's glyphs, the ssh transport): no room reads them
itself, and tests and benches hand in their own (`Settings(events_mb=...)`). A variable set
to nothing (`VAR=`) is unset.

Not here: the worker side's own variables (contract.protocol's ENV_*, set by the supervisor
for each worker, and worker.seam.SCRIPTED_CUDA_ENV), which the worker reads itself (stdlib only, no
mpwatch import beyond its own). Pure and stdlib only; any thread may build one.
"""
from __future__ import annotations

import math
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

PySpy = Literal["stall", "always", "off"]


class SettingsError(Exception):
    """A switch with a bad value; the message is the one line the user sees: VAR=value: why."""


@dataclass(frozen=True)
class GpuThresholds:
    """The GPU alerts' thresholds (supervisor.gpu.alerts; docs/gpu-alerts.md says where each
    default comes from). A share is given as a fraction (0.9) or a percentage (90)."""

    mem_high: float = 0.90
    """MPWATCH_GPU_MEM_ALERT (0.9): the share of a GPU's memory that counts as nearly full."""
    fill_s: float = 120.0
    """MPWATCH_GPU_FILL_S (120): memory that would be full this soon at its slope is an alert."""
    idle_s: float = 60.0
    """MPWATCH_GPU_IDLE_S (60): how long a GPU must stay idle before it is said."""
    idle_util: float = 10.0
    """MPWATCH_GPU_IDLE_UTIL (10): "idle" is a utilization below this %."""
    busy_util: float = 75.0
    """MPWATCH_GPU_BUSY_UTIL (75): "working" is a utilization at or above this %."""
    idle_mem: float = 0.40
    """MPWATCH_GPU_IDLE_MEM (0.4): "the batch could grow" wants memory below this share too."""
    outside: float = 0.05
    """MPWATCH_GPU_OUTSIDE (0.05): a process outside the run holding this share of a GPU."""
    retries: float = 1
    """MPWATCH_GPU_RETRIES (1): allocator retries within the growth window that raise an alert."""
    frag: float = 0.25
    """MPWATCH_GPU_FRAG (0.25): a rank's reserved-but-unallocated share of its reserved memory..."""
    frag_min: float = 1 << 30
    """MPWATCH_GPU_FRAG_MIN (1 GiB): ...and at least these many bytes, while its GPU is nearly full."""
    growth_window_s: float = 60.0
    """MPWATCH_GPU_GROWTH_WINDOW_S (60): slopes and retry counts are measured over this long."""
    cooldown_s: float = 60.0
    """MPWATCH_GPU_COOLDOWN_S (60): an alert that ends and starts again is not re-announced sooner."""


@dataclass(frozen=True)
class Settings:
    """The switches, each with its default (docs/settings.md has the same table)."""

    events_mb: float = 128.0
    """MPWATCH_EVENTS_MB (128): events.jsonl's cap in MB; past it old reports are thinned."""
    gpu_timeline_mb: float = 64.0
    """MPWATCH_GPU_TIMELINE_MB (64): gpu.jsonl's cap in MB; past it old ticks are thinned."""
    gpu: GpuThresholds = field(default_factory=GpuThresholds)
    """MPWATCH_GPU_* (above): the GPU alerts' thresholds."""
    node_lost_s: float = 10.0
    """MPWATCH_NODE_LOST_S (10): a node whose beat stands still this long is lost."""
    pyspy: PySpy = "stall"
    """MPWATCH_PYSPY (stall): native stacks with py-spy: for stall dumps, for every dump, or off (then no
    py-spy profile of a rank without torch either: supervisor.live.flame)."""
    nccl_flight: bool = False
    """MPWATCH_NCCL_FLIGHT (0): the workers' NCCL flight recorder, dumped with each stack dump."""
    ssh: tuple[str, ...] = ("ssh",)
    """MPWATCH_SSH (ssh): the ssh command that reaches other machines, options included."""
    ascii: bool = False
    """MPWATCH_ASCII (0): the TUI draws with ASCII only, whatever the locale says."""
    tmpdir: Path = Path("/tmp")
    """MPWATCH_TMPDIR (/tmp): where the runtime directory goes when XDG_RUNTIME_DIR is unusable."""
    strict_states: bool = False
    """MPWATCH_STRICT_STATES (0): a state change the table lacks raises (the supervisor's tests)."""
    metrics_port: int | None = None
    """MPWATCH_METRICS_PORT (none): serve Prometheus metrics on this port, as --metrics-port does."""
    auto: bool = True
    """MPWATCH_AUTO (1): automatic steps, losses and time split in scripts that import torch."""
    scripted_nvml: str | None = None
    """MPWATCH_SCRIPTED_NVML (none): the GPU seam's scenario (probes.seam): a scripted NVML, no GPU needed."""
    max_workers: int | None = None
    """MPWATCH_MAX_WORKERS (64, or 4 per CPU or GPU if more): the most workers `resize` may ask for."""
    cuda_history_entries: int = 20_000
    """MPWATCH_CUDA_HISTORY_ENTRIES (20000): allocations each rank's history keeps (--cuda-memory-history)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Every switch of `environ` (default: this process's), checked; SettingsError names
        the first bad one."""
        env = os.environ if environ is None else environ
        top: dict[str, Any] = {}
        gpu: dict[str, Any] = {}
        for var, (name, parse) in SWITCHES.items():
            raw = env.get(var)
            if raw is None or not raw.strip():
                continue
            try:
                value = parse(raw.strip())
            except ValueError as exc:
                raise SettingsError(f"{var}={_shown(raw)}: {exc}") from None
            if name.startswith("gpu."):
                gpu[name[4:]] = value
            else:
                top[name] = value
        return replace(cls(), gpu=replace(GpuThresholds(), **gpu), **top)


def _shown(raw: str, width: int = 60) -> str:
    """The value as the error line shows it: printable, bounded."""
    text = "".join(c if c.isprintable() else "?" for c in raw)
    return text if len(text) <= width else text[: width - 1] + "…"


Parser = Callable[[str], Any]


def _number(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(v):
        raise ValueError("not a finite number")
    return v


def _above(lo: float, hi: float, what: str) -> Parser:
    """A number in (lo, hi]."""
    def parse(text: str) -> float:
        v = _number(text)
        if v <= lo:
            raise ValueError(f"{what} above {lo:g}")
        if v > hi:
            raise ValueError(f"{what}, at most {hi:.15g}")
        return v
    return parse


def _from(lo: float, hi: float, what: str) -> Parser:
    """A number in [lo, hi]."""
    def parse(text: str) -> float:
        v = _number(text)
        if v < lo:
            raise ValueError(f"{what}, at least {lo:g}")
        if v > hi:
            raise ValueError(f"{what}, at most {hi:.15g}")
        return v
    return parse


def _share(text: str) -> float:
    """A fraction (0.9) or a percentage (90), as a fraction."""
    v = _number(text)
    if not 0 < v <= 100:
        raise ValueError("a fraction (0.9) or a percentage (90) above 0, at most 100")
    return v / 100.0 if v > 1 else v


def _switch(text: str) -> bool:
    word = text.lower()
    if word in ("1", "yes", "on", "true"):
        return True
    if word in ("0", "no", "off", "false"):
        return False
    raise ValueError("1 or 0 (yes/no, on/off, true/false)")


def _pyspy(text: str) -> str:
    word = text.lower()
    if word not in ("stall", "always", "off"):
        raise ValueError("stall, always or off")
    return word


def _command(text: str) -> tuple[str, ...]:
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:  # "No closing quotation", "No escaped character"
        raise ValueError(f"not a command line ({str(exc).lower()})") from None
    if not words or not words[0]:
        raise ValueError("an empty command")
    return words


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ValueError("a port number") from None
    if not 0 < v < 65536:
        raise ValueError("a port from 1 to 65535")
    return v


def _count(lo: int, hi: int, what: str) -> Parser:
    """A whole number in [lo, hi]."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise ValueError(f"not a whole number ({what})") from None
        if not lo <= v <= hi:
            raise ValueError(f"{what}, from {lo} to {hi}")
        return v
    return parse


def _absolute(text: str) -> Path:
    path = Path(text)
    if not path.is_absolute():
        raise ValueError("an absolute path")
    return path


MB_MAX = 1e9  # a petabyte: any bigger cap is a typo
SECONDS_MAX = 1e7  # about four months

# variable -> (field, its parser); a field's default is the switch's default. "gpu.X" is
# a field of GpuThresholds.
SCRIPTED_NVML_ENV = "MPWATCH_SCRIPTED_NVML"  # tests strip it to run the C stand-in instead
SWITCHES: dict[str, tuple[str, Parser]] = {
    "MPWATCH_EVENTS_MB": ("events_mb", _above(0, MB_MAX, "a number of MB")),
    "MPWATCH_GPU_TIMELINE_MB": ("gpu_timeline_mb", _above(0, MB_MAX, "a number of MB")),
    "MPWATCH_NODE_LOST_S": ("node_lost_s", _above(0, SECONDS_MAX, "a number of seconds")),
    "MPWATCH_PYSPY": ("pyspy", _pyspy),
    "MPWATCH_NCCL_FLIGHT": ("nccl_flight", _switch),
    "MPWATCH_SSH": ("ssh", _command),
    "MPWATCH_ASCII": ("ascii", _switch),
    "MPWATCH_TMPDIR": ("tmpdir", _absolute),
    "MPWATCH_STRICT_STATES": ("strict_states", _switch),
    "MPWATCH_METRICS_PORT": ("metrics_port", _port),
    "MPWATCH_AUTO": ("auto", _switch),
    SCRIPTED_NVML_ENV: ("scripted_nvml", str),
    "MPWATCH_MAX_WORKERS": ("max_workers", _count(1, 1 << 20, "a number of workers")),
    "MPWATCH_CUDA_HISTORY_ENTRIES": ("cuda_history_entries", _count(1, 10_000_000, "a number of entries")),
    "MPWATCH_GPU_MEM_ALERT": ("gpu.mem_high", _share),
    "MPWATCH_GPU_FILL_S": ("gpu.fill_s", _above(0, SECONDS_MAX, "a number of seconds")),
    "MPWATCH_GPU_IDLE_S": ("gpu.idle_s", _above(0, SECONDS_MAX, "a number of seconds")),
    "MPWATCH_GPU_IDLE_UTIL": ("gpu.idle_util", _from(0, 100, "a percentage")),
    "MPWATCH_GPU_BUSY_UTIL": ("gpu.busy_util", _above(0, 100, "a percentage")),
    "MPWATCH_GPU_IDLE_MEM": ("gpu.idle_mem", _share),
    "MPWATCH_GPU_OUTSIDE": ("gpu.outside", _share),
    "MPWATCH_GPU_RETRIES": ("gpu.retries", _above(0, 1e9, "a number of retries")),
    "MPWATCH_GPU_FRAG": ("gpu.frag", _share),
    "MPWATCH_GPU_FRAG_MIN": ("gpu.frag_min", _above(0, 1e18, "a number of bytes")),
    "MPWATCH_GPU_GROWTH_WINDOW_S": ("gpu.growth_window_s", _above(0, SECONDS_MAX, "a number of seconds")),
    "MPWATCH_GPU_COOLDOWN_S": ("gpu.cooldown_s", _from(0, SECONDS_MAX, "a number of seconds")),
}

