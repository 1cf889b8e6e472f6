"""MIG slices as GPUs of their own: found once at open (each MIG device of a GPU in MIG mode:
its handle, UUID, name, GPU and compute instance ids, profile), then sampled each tick as a
GpuSample under its GPU's: memory from the slice's own handle, processes by the instance ids
NVML gives each one. Runs on the supervisor's GPU poller thread (probes.gpu.GpuProbe).

What MIG keeps from a user, said in plain words instead of values: utilization and per-process
SM % are not reported in MIG mode ("n/a on MIG", never 0); the whole GPU's memory and process
list are root's (NVML_ERROR_NO_PERMISSION), so a user reads each slice's own list instead, where
the memory of another user's process is not available either.
"""
from __future__ import annotations

from mpwatch.contract import COUNTERS, DevKey
from mpwatch.probes import nvml_words
from mpwatch.probes.gpu_backend import Backend
from mpwatch.probes.gpu_reads import read_memory
from mpwatch.probes.gpu_sample import Device, GpuSample, MigId, MigSlot

ON_MIG = nvml_words.ON_MIG
OTHERS_MEMORY = "needs root on this MIG GPU for another user's process"


def profile_of(name: str | None) -> str | None:
    """A MIG device's profile from the name NVML gives it ("NVIDIA A100-SXM4-80GB MIG 1g.10gb")."""
    if not name or " MIG " not in name:
        return None
    return name.rsplit(" MIG ", 1)[1].strip() or None


def discover(b: Backend, h: object) -> list[MigSlot]:
    """The slices of a GPU in MIG mode; none for another GPU."""
    try:
        found = b.mig_slots(h)
    except Exception:  # noqa: BLE001 - MIG is optional: the GPU is sampled whole
        return []
    return [MigSlot(handle, uuid, name, MigId(gi, ci, profile_of(name)))
            for handle, uuid, name, gi, ci in found]


def uuid_keys(d: Device) -> dict[str, DevKey]:
    """The names a worker's CUDA_VISIBLE_DEVICES may give each slice: "MIG-<uuid>" (R470 on)
    and the older "MIG-GPU-<uuid>/<gi>/<ci>"."""
    out: dict[str, DevKey] = {}
    for slot in d.slots:
        key = (d.index, slot.id.gi, slot.id.ci)
        if slot.uuid:
            out[slot.uuid] = key
        if d.uuid:
            out[f"MIG-{d.uuid}/{slot.id.gi}/{slot.id.ci}"] = key
    return out


def sample_slices(b: Backend, d: Device, parent: GpuSample, with_processes: bool) -> None:
    """Each slice of a GPU in MIG mode under its sample; with_processes, who runs on each."""
    parent.slices = [_slice(b, slot, parent) for slot in d.slots]
    if with_processes:
        for s in (parent, *parent.slices):
            s.errors["proc_util"] = ON_MIG
        _processes(b, d, parent)


def _slice(b: Backend, slot: MigSlot, parent: GpuSample) -> GpuSample:
    s = GpuSample(index=parent.index, name=slot.name, uuid=slot.uuid, ts=parent.ts, mig=slot.id)
    read_memory(b, slot, slot.handle, s, mig=True)
    s.errors.update({c.what: ON_MIG for c in COUNTERS if not c.on_mig})  # a slice has no counters of its own
    return s


def _processes(b: Backend, d: Device, parent: GpuSample) -> None:
    """As root, the GPU's one list, each process sent to its slice by its instance ids; a user
    is refused it (said once, on the GPU) and reads each slice's own."""
    listing = b.instance_processes
    if d.parent_procs:
        try:
            procs = listing(d.handle)
        except Exception as exc:  # noqa: BLE001
            if not nvml_words.refused(exc):
                parent.errors["processes"] = nvml_words.words(exc, mig=True)
                return
            d.parent_procs = False  # not root: the slices' own lists from now on
        else:
            _route(procs, parent)
            return
    parent.errors["processes"] = nvml_words.ROOT_ON_MIG
    for slot, s in zip(d.slots, parent.slices, strict=True):
        try:
            s.processes = [(pid, mem) for pid, mem, _, _ in listing(slot.handle)]
        except Exception as exc:  # noqa: BLE001
            s.errors["processes"] = nvml_words.words(exc, mig=True)
            continue
        if any(mem is None for _, mem in s.processes):
            s.errors["process_memory"] = OTHERS_MEMORY


def _route(procs: list[tuple[int, int | None, int | None, int | None]], parent: GpuSample) -> None:
    """Each process to the slice its instance ids name; one in none of them stays the GPU's."""
    by_id = {(s.mig.gi, s.mig.ci): s for s in parent.slices if s.mig is not None}
    by_gi = {s.mig.gi: s for s in parent.slices if s.mig is not None}
    parent.processes = []
    for s in parent.slices:
        s.processes = []
    for pid, mem, gi, ci in procs:
        target = None if gi is None else by_gi.get(gi) if ci is None else by_id.get((gi, ci))
        (target.processes if target is not None and target.processes is not None
         else parent.processes).append((pid, mem))
