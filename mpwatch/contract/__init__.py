"""What every side shares: the status schema, event names, the wire format, value coercers and
pure rules. This is the contract's one face: a reader imports every contract name from here
(`from mpwatch.contract import Status, Event`), never from the module that defines it; a module
read as a namespace is imported from here too (`from mpwatch.contract import protocol`).

The face is lazy (PEP 562): importing the package loads none of its modules, and a name loads its
own module on first use. The worker side imports mpwatch.contract.protocol in every training
process at `import mpwatch`, and must load that module alone (the standard library only, no
`typing`). The checker reads the names from the TYPE_CHECKING block; `__all__` and `_HOMES` say
the same for the run time: a name new to the face goes in all three (tests/test_contract_face.py
checks that they agree, that each name is where it says, and that no reader goes around the face).
"""
from __future__ import annotations

TYPE_CHECKING = False  # `typing` is not loaded at run time (the worker side)
if TYPE_CHECKING:
    from mpwatch.contract.actions import (
        ACTIONS,
        CHECKPOINT,
        KEPT,
        MEMORY,
        PROFILE,
        PROFILE_STEPS,
        PROFILE_STEPS_MAX,
        Action,
        ActionRequest,
        CheckpointRequest,
        FileResult,
        MemoryRequest,
        ProfileRequest,
        RankAnswer,
        check_args,
        newest_written,
        profile_span,
        rank_state,
        rank_states,
        read_result,
        record,
    )
    from mpwatch.contract.coerce import NON_FINITE, TIME_MAX, as_float, as_int, as_number, as_str, as_time
    from mpwatch.contract.cuda_view import CudaView, OomRecord
    from mpwatch.contract.culprit import ranks_text
    from mpwatch.contract.gpu_counters import BY_KEY, COUNTERS, SHOWN, GpuCounter, reading
    from mpwatch.contract.gpu_records import (
        GpuMark,
        GpuThinned,
        GpuTick,
        GpuTickGpu,
        GpuTickRank,
        GpuTimelineReply,
    )
    from mpwatch.contract.gpu_view import (
        ALERT_KINDS,
        HISTORY_POINTS,
        ON_MIG,
        ROOT_ON_MIG,
        THROTTLE_REASONS,
        AlertKind,
        DevKey,
        GpuAlert,
        GpuHistory,
        GpuProcess,
        GpuView,
        MemoryBreakdown,
        MigSlice,
        ThrottleReason,
        alert_kind,
        dev_key,
        devices,
        leaves,
        slowed_by,
    )
    from mpwatch.contract.live import (
        TUNABLE_KINDS,
        Declared,
        Done,
        LiveEntry,
        LiveView,
        Result,
        TunableChange,
        TunableStatus,
        TunableType,
        TunableValue,
        in_force,
        keep_refused,
        parse_value,
        pending_changes,
        shown,
        validate_live,
        value_of,
    )
    from mpwatch.contract.names import (
        ALIVE_STATES,
        ENDED_STATES,
        UNREACHABLE,
        Event,
        EventFields,
        EventRecord,
        RunState,
        State,
    )
    from mpwatch.contract.numtext import INT_DIGITS
    from mpwatch.contract.pace import OTHER, WORK_METRIC, PaceWindow
    from mpwatch.contract.protocol import (
        ENV_RUN,
        MAX_EXACT,
        MAX_METRIC_NAME,
        MAX_METRIC_TEXT,
        MAX_METRICS_ACCEPTED,
        MAX_STEP,
        OOM_MAX,
        OOM_MESSAGE_MAX,
        BadFrame,
        Reply,
        encode_lossy,
    )
    from mpwatch.contract.status import (
        MERGED_WORKER_KEYS,
        RUN_ALERT_KINDS,
        ChildStatus,
        Culprit,
        GpuShare,
        Lag,
        NodeInfo,
        NodePeer,
        NodeStatus,
        Outsider,
        Pace,
        RunAlert,
        RunAlertKind,
        RunInfo,
        RunOptions,
        RunPace,
        SlowdownInfo,
        StallInfo,
        Status,
        StepsFrom,
        StopInfo,
        StragglerInfo,
        WorkerGpu,
        WorkerMemory,
        WorkerStatus,
        put_input_notes,
    )
    from mpwatch.contract.straggler import RankLabel, Score, rank_label

__all__ = [
    "ACTIONS",
    "ALERT_KINDS",
    "ALIVE_STATES",
    "BY_KEY",
    "CHECKPOINT",
    "COUNTERS",
    "ENDED_STATES",
    "ENV_RUN",
    "HISTORY_POINTS",
    "INT_DIGITS",
    "KEPT",
    "MAX_EXACT",
    "MAX_METRICS_ACCEPTED",
    "MAX_METRIC_NAME",
    "MAX_METRIC_TEXT",
    "MAX_STEP",
    "MEMORY",
    "MERGED_WORKER_KEYS",
    "NON_FINITE",
    "ON_MIG",
    "OOM_MAX",
    "OOM_MESSAGE_MAX",
    "OTHER",
    "PROFILE",
    "PROFILE_STEPS",
    "PROFILE_STEPS_MAX",
    "ROOT_ON_MIG",
    "RUN_ALERT_KINDS",
    "SHOWN",
    "THROTTLE_REASONS",
    "TIME_MAX",
    "TUNABLE_KINDS",
    "UNREACHABLE",
    "WORK_METRIC",
    "Action",
    "ActionRequest",
    "AlertKind",
    "BadFrame",
    "CheckpointRequest",
    "ChildStatus",
    "CudaView",
    "Culprit",
    "Declared",
    "DevKey",
    "Done",
    "Event",
    "EventFields",
    "EventRecord",
    "FileResult",
    "GpuAlert",
    "GpuCounter",
    "GpuHistory",
    "GpuMark",
    "GpuProcess",
    "GpuShare",
    "GpuThinned",
    "GpuTick",
    "GpuTickGpu",
    "GpuTickRank",
    "GpuTimelineReply",
    "GpuView",
    "Lag",
    "LiveEntry",
    "LiveView",
    "MemoryBreakdown",
    "MemoryRequest",
    "MigSlice",
    "NodeInfo",
    "NodePeer",
    "NodeStatus",
    "OomRecord",
    "Outsider",
    "Pace",
    "PaceWindow",
    "ProfileRequest",
    "RankAnswer",
    "RankLabel",
    "Reply",
    "Result",
    "RunAlert",
    "RunAlertKind",
    "RunInfo",
    "RunOptions",
    "RunPace",
    "RunState",
    "Score",
    "SlowdownInfo",
    "StallInfo",
    "State",
    "Status",
    "StepsFrom",
    "StopInfo",
    "StragglerInfo",
    "ThrottleReason",
    "TunableChange",
    "TunableStatus",
    "TunableType",
    "TunableValue",
    "WorkerGpu",
    "WorkerMemory",
    "WorkerStatus",
    "alert_kind",
    "as_float",
    "as_int",
    "as_number",
    "as_str",
    "as_time",
    "check_args",
    "dev_key",
    "devices",
    "encode_lossy",
    "in_force",
    "keep_refused",
    "leaves",
    "newest_written",
    "parse_value",
    "pending_changes",
    "profile_span",
    "put_input_notes",
    "rank_label",
    "rank_state",
    "rank_states",
    "ranks_text",
    "read_result",
    "reading",
    "record",
    "shown",
    "slowed_by",
    "validate_live",
    "value_of",
]

# The module each name of the face lives in (the lazy __getattr__ below reads it).
_HOMES: dict[str, frozenset[str]] = {
    "actions": frozenset({"ACTIONS", "Action", "ActionRequest", "CHECKPOINT", "CheckpointRequest",
                          "FileResult", "KEPT", "MEMORY", "MemoryRequest", "PROFILE", "PROFILE_STEPS",
                          "PROFILE_STEPS_MAX", "ProfileRequest", "RankAnswer", "check_args",
                          "newest_written", "profile_span", "rank_state", "rank_states", "read_result",
                          "record"}),
    "coerce": frozenset({"NON_FINITE", "TIME_MAX", "as_float", "as_int", "as_number", "as_str", "as_time"}),
    "cuda_view": frozenset({"CudaView", "OomRecord"}),
    "culprit": frozenset({"ranks_text"}),
    "gpu_counters": frozenset({"BY_KEY", "COUNTERS", "GpuCounter", "SHOWN", "reading"}),
    "gpu_records": frozenset({"GpuMark", "GpuThinned", "GpuTick", "GpuTickGpu", "GpuTickRank",
                              "GpuTimelineReply"}),
    "gpu_view": frozenset({"ALERT_KINDS", "AlertKind", "DevKey", "GpuAlert", "GpuHistory", "GpuProcess",
                           "GpuView", "HISTORY_POINTS", "MemoryBreakdown", "MigSlice", "ON_MIG",
                           "ROOT_ON_MIG", "THROTTLE_REASONS", "ThrottleReason", "alert_kind", "dev_key",
                           "devices", "leaves", "slowed_by"}),
    "live": frozenset({"Declared", "Done", "LiveEntry", "LiveView", "Result", "TUNABLE_KINDS",
                       "TunableChange", "TunableStatus", "TunableType", "TunableValue", "in_force",
                       "keep_refused", "parse_value", "pending_changes", "shown", "validate_live",
                       "value_of"}),
    "names": frozenset({"ALIVE_STATES", "ENDED_STATES", "Event", "EventFields", "EventRecord", "RunState",
                        "State", "UNREACHABLE"}),
    "numtext": frozenset({"INT_DIGITS"}),
    "pace": frozenset({"OTHER", "PaceWindow", "WORK_METRIC"}),
    "protocol": frozenset({"BadFrame", "ENV_RUN", "MAX_EXACT", "MAX_METRICS_ACCEPTED", "MAX_METRIC_NAME",
                           "MAX_METRIC_TEXT", "MAX_STEP", "OOM_MAX", "OOM_MESSAGE_MAX", "Reply",
                           "encode_lossy"}),
    "status": frozenset({"ChildStatus", "Culprit", "GpuShare", "Lag", "MERGED_WORKER_KEYS", "NodeInfo",
                         "NodePeer", "NodeStatus", "Outsider", "Pace", "RUN_ALERT_KINDS", "RunAlert",
                         "RunAlertKind", "RunInfo", "RunOptions", "RunPace", "SlowdownInfo", "StallInfo",
                         "Status", "StepsFrom", "StopInfo", "StragglerInfo", "WorkerGpu", "WorkerMemory",
                         "WorkerStatus", "put_input_notes"}),
    "straggler": frozenset({"RankLabel", "Score", "rank_label"}),
}


def _home(name: str) -> str | None:
    for module, names in _HOMES.items():
        if name in names:
            return module
    return None


if not TYPE_CHECKING:
    def __getattr__(name: str) -> object:
        """A face name, loaded from its module on first use (then a plain attribute)."""
        module = _home(name)
        if module is None:  # a submodule (`from mpwatch.contract import protocol`) is imported by Python
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        value = getattr(import_module(f"{__name__}.{module}"), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(__all__))
