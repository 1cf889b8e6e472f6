"""What an NVML error means, in a few plain words for the N/A it leaves (a GpuSample's
`errors`): NVML's own strings are its codes' names ("Insufficient Permissions", "Unknown
Error"), which tell a user nothing of what to do. Pure; the GPU poller thread calls it.

Codes are NVML's (nvml.h's nvmlReturn_t), by number: the bindings may lack a newer code's name.
"""
from __future__ import annotations

from mpwatch.contract import ON_MIG as ON_MIG  # what MIG does not report: said so, never 0
from mpwatch.contract import ROOT_ON_MIG as ROOT_ON_MIG

NO_PERMISSION = 4
NOT_SUPPORTED = 3
FUNCTION_NOT_FOUND = 13
ARGUMENT_VERSION_MISMATCH = 25


_WORDS = {
    1: "NVML is not started",
    2: "the driver refused the query (invalid argument)",
    NOT_SUPPORTED: "not supported on this GPU or driver",
    NO_PERMISSION: "needs root",
    5: "NVML was started twice",
    6: "not found",
    7: "the driver's answer did not fit",
    8: "the GPU's external power cables are not connected properly",
    9: "the NVIDIA driver is not loaded",
    10: "the driver timed out",
    11: "the driver saw an interrupt problem with the GPU",
    12: "no NVML library",
    FUNCTION_NOT_FOUND: "this driver is too old for it",
    14: "the GPU's infoROM is corrupted",
    15: "the GPU has fallen off the bus",
    16: "the GPU needs a reset",
    17: "the operating system blocked the query",
    18: "the NVML library and the kernel driver differ (driver updated without a reboot?)",
    19: "the GPU is in use by another client",
    20: "the driver ran out of memory",
    21: "no data yet",
    22: "not available on a virtual GPU with ECC on",
    23: "the driver ran out of resources",
    24: "this clock frequency is not supported",
    ARGUMENT_VERSION_MISMATCH: "this driver does not know this version of the call",
    26: "this driver no longer offers it",
    27: "the driver is not ready yet",
    28: "the GPU is gone",
    29: "the GPU is not in a state to answer",
    30: "this kind of reset is not supported",
    999: "the driver failed without saying why",
}


def code_of(exc: BaseException) -> int | None:
    """The NVML return code an exception carries (pynvml.NVMLError's `value`), else None."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def words(exc: BaseException, mig: bool = False) -> str:
    """Why a value is N/A, in plain words; `mig`: the GPU is in MIG mode (a refusal there is
    root's privilege, not a broken driver)."""
    code = code_of(exc)
    if code == NO_PERMISSION and mig:
        return ROOT_ON_MIG
    if code is not None and code in _WORDS:
        return _WORDS[code]
    text = " ".join((str(exc) or type(exc).__name__).split())[:120]
    return f"NVML error {code}: {text}" if code is not None else text


def refused(exc: BaseException) -> bool:
    return code_of(exc) == NO_PERMISSION


def not_there(exc: BaseException) -> bool:
    """The device or driver cannot answer this at all: stop asking."""
    return code_of(exc) in (NOT_SUPPORTED, FUNCTION_NOT_FOUND, ARGUMENT_VERSION_MISMATCH)
