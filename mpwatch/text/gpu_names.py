"""How a GPU or a MIG slice is named for people ("GPU 0", "GPU 0 MIG 3g.40gb (GI 1)"), and
why its values are N/A, grouped by reason so each is said once ("utilization and SM % per
process: n/a on MIG"). Pure; the supervisor's alerts, `ctl status` and the TUI word them alike.
"""
from __future__ import annotations

from collections.abc import Mapping

from mpwatch.contract import COUNTERS, GpuView, MigSlice
from mpwatch.contract import ON_MIG as ON_MIG
from mpwatch.contract import ROOT_ON_MIG as ROOT_ON_MIG

# What each N/A value of a view is, in words (a GpuSample's `errors` keys), in the order the
# notes say them: the counters' readings in their words (contract.gpu_counters), the others'.
NOUNS = {"memory": "memory", "processes": "process list", **{c.what: c.noun for c in COUNTERS},
         "proc_util": "SM % per process", "throttle": "clock reasons", "process_memory": "process memory"}


def slice_text(mig: MigSlice | Mapping[str, object]) -> str:
    """"MIG 3g.40gb (GI 1)"; "(GI 1 CI 1)" where the GPU instance is split further."""
    profile = mig.get("profile")
    ids = f"GI {mig.get('gi')}" + (f" CI {mig.get('ci')}" if mig.get("ci") else "")
    return f"MIG {profile} ({ids})" if profile else f"MIG {ids}"


def device_name(index: int | None, mig: MigSlice | Mapping[str, object] | None = None) -> str:
    if index is None:
        return "an unknown GPU"
    return f"GPU {index}" + (f" {slice_text(mig)}" if mig else "")


def view_name(view: GpuView) -> str:
    """A view's name: its GPU's, and which slice it is."""
    return device_name(view["index"], view.get("mig"))


def label(index: int, mig: MigSlice | Mapping[str, object] | None = None) -> str:
    """A GPU or slice in a cell: "0", "0:1" (GPU 0's GPU instance 1), "0:1.1" (and compute instance 1)."""
    if not mig:
        return str(index)
    return f"{index}:{mig.get('gi')}" + (f".{mig.get('ci')}" if mig.get("ci") else "")


def short_slice(mig: MigSlice | Mapping[str, object]) -> str:
    """A slice in a few characters, for a row: "3g.40gb" (or "GI 1" when it has no profile)."""
    return str(mig.get("profile") or f"GI {mig.get('gi')}")


def na_notes(errors: Mapping[str, str], skip: frozenset[str] = frozenset()) -> list[str]:
    """Why values are N/A, one note per reason: "memory and process list: needs root on this
    MIG GPU"; reasons in `skip` are said elsewhere (a slice's "n/a on MIG", said by its GPU)."""
    by_why: dict[str, list[str]] = {}
    order = list(NOUNS)
    for what, why in sorted(errors.items(), key=lambda e: order.index(e[0]) if e[0] in order else len(order)):
        if why not in skip:
            by_why.setdefault(why, []).append(NOUNS.get(what, what.replace("_", " ")))
    return [f"{_and(whats)}: {why}" for why, whats in by_why.items()]


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" and {words[-1]}"
