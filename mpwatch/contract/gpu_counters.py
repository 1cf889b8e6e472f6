"""The GPU counters: one record per number NVML reads of a GPU each tick, in the order the
screens show them. The probe samples them (probes.gpu), the supervisor copies them into each
GpuView (supervisor.gpu.views), the replay fills what gpu.jsonl keeps of them
(sources.replay.rebuild), and one formatter (text.gpu_values) words them for the GPU panel,
the GPU screen and `ctl status`. Memory (its bar, the driver's reserve), the processes and the
clock event reasons are no counters: each has its own reading and its own words.

A new counter: a record here, its key in contract.gpu_view.GpuView and in
probes.gpu_sample.GpuSample, and what docs/architecture.md#a-gpu-counter says besides.
Pure; any thread.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class NvmlCall:
    """How NVML gives a counter: pynvml's function `fn`, called (handle, *args) with args named
    by pynvml's constants; the struct field `field` of what it returns (None: the number
    itself); in units `per` to one of the counter's (milliwatts: 1000)."""

    fn: str
    args: tuple[str, ...] = ()
    field: str | None = None
    per: int = 1


@dataclass(frozen=True)
class GpuCounter:
    key: str  # its name in a GpuSample and a GpuView (the status)
    nvml: NvmlCall
    what: str  # the reading it is part of: its key in a view's `errors`
    noun: str  # that reading in words, for why it is N/A ("temperature: needs root")
    label: str = ""  # the word before its value where it is shown plainly; "": its unit says it
    unit: str = ""  # after the value: "%", "C", "W"
    digits: int | None = None  # decimals the sample keeps (None: a whole number)
    width: int = 0  # >0: shown plainly (the GPU panel's wide row in a cell this wide, the GPU
    #                 screen's heading, ctl status's GPU line); 0: the screens word it themselves
    required: bool = False  # every view has it (a MIG slice's: None), else a whole GPU's only
    on_mig: bool = True  # False: a GPU in MIG mode reports none ("n/a on MIG", never asked)


COUNTERS: tuple[GpuCounter, ...] = (
    GpuCounter("util_gpu", NvmlCall("nvmlDeviceGetUtilizationRates", field="gpu"), "utilization",
               "utilization", label="util", unit="%", required=True, on_mig=False),
    GpuCounter("util_mem", NvmlCall("nvmlDeviceGetUtilizationRates", field="memory"), "utilization",
               "utilization", label="mem", unit="%", required=True, on_mig=False),
    GpuCounter("temperature", NvmlCall("nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)), "temperature",
               "temperature", unit="C", width=4, required=True),
    GpuCounter("power_w", NvmlCall("nvmlDeviceGetPowerUsage", per=1000), "power", "power", unit="W",
               digits=1, width=5, required=True),
    GpuCounter("sm_clock_mhz", NvmlCall("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",)), "clocks", "SM clock",
               unit=" MHz"),
    GpuCounter("sm_clock_max_mhz", NvmlCall("nvmlDeviceGetMaxClockInfo", ("NVML_CLOCK_SM",)), "clocks",
               "SM clock", unit=" MHz"),
)
BY_KEY: dict[str, GpuCounter] = {c.key: c for c in COUNTERS}
SHOWN: tuple[GpuCounter, ...] = tuple(c for c in COUNTERS if c.width)  # the plain ones, in order


def reading(view: Mapping[str, object], c: GpuCounter) -> float | None:
    """A counter's value in a view (or a gpu.jsonl tick); None where it has none or it is not
    a number (a status from elsewhere)."""
    v = view.get(c.key)
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
