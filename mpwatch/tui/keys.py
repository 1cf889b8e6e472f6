"""The TUI's one key table. Every key of the main screen is a Textual Binding here, once: the
word the footer shows (description), the sentence the help screen and the command palette show
(tooltip), and whether it acts on the run (Key.acts). tui.app binds LIVE; tui.replay_app binds
CURSOR too, and takes the keys that act off its footer; the detail view binds DETAIL (its own
keys, and LIVE's on its one worker). The footer, the command palette (tui.app's
get_system_commands) and the help screen (tui.screens.help) all read this table, so a key
added here is offered everywhere, and one that acts leaves every list where nothing can be
acted on (a replay, a run that has ended). Pure data; read on the UI thread.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from textual.binding import Binding


@dataclass(frozen=True)
class Key(Binding):
    """A Binding of the table, and whether it acts on the run."""

    acts: bool = False
    """It acts on the run: its processes (signals, restarts, a resize, a stack dump) or what its
    training loop is told (a checkpoint). Offered only on a live run."""
    read_only: str = ""
    """What the key does where nothing can act (a replay, a run that has ended), when that
    differs from its tooltip: the help and the palette say this there."""


# In footer order: ? and q first, since a narrow footer leaves out its last keys and they must
# stay (60 columns); at 80 columns it ends after l (tui.widgets.keys_footer). The help and the
# palette follow the same order.
# A description is the footer's word for a key it shows, and the palette's name for every key.
LIVE: tuple[Key, ...] = (
    Key("question_mark", "help", "Help", tooltip="these keys"),
    Key("q", "quit_dialog", "Quit", tooltip="leave; on a live run: detach (it goes on), stop it, or cancel"),
    Key("enter", "detail", "Detail of the selected worker", show=False, key_display="Enter",
        tooltip="detail: loss plot (log scale where it spans 10x; y switches), logs' tail, stacks, children"),
    Key("j", "cursor_down", "Select the next worker", show=False,
        tooltip="select the next worker (as down does; up goes back)"),
    Key("g", "gpus", "GPUs",
        tooltip="GPUs over time (w: the window), ranks, other processes, alerts"),
    Key("p", "pause", "Pause", acts=True,
        tooltip="pause or resume the selected worker (SIGSTOP / SIGCONT)"),
    Key("P", "pause_all", "Pause / resume all", show=False, acts=True, tooltip="pause or resume all workers"),
    Key("k", "kill", "Kill", acts=True, tooltip="kill the selected worker (asks first)"),
    Key("r", "restart", "Restart the selected worker", show=False, acts=True,
        tooltip="restart the selected worker (asks first; or all of its group)"),
    Key("R", "restart_all", "Restart all workers", show=False, acts=True,
        tooltip="restart all workers (asks first)"),
    Key("plus", "grow", "Add a worker", show=False, acts=True,
        tooltip="add a worker: resize by +1 (asks first when all restart)"),
    Key("minus", "shrink", "Remove a worker", show=False, acts=True,
        tooltip="remove a worker: resize by -1 (asks first when all restart)"),
    Key("c", "checkpoint", "Checkpoint", acts=True,
        tooltip="checkpoint now: should_checkpoint() is True once (rank or all)"),
    # In a replay (and once a run has ended) t shows the tunables as of the moment shown, which is
    # what a post-mortem asks (which lr was in force when the loss diverged); nothing is set there.
    Key("t", "tunables", "Tunables",
        tooltip="tunables: mpwatch.tunable() values and changes; Enter sets one",
        read_only="tunables as of the moment shown: mpwatch.tunable() values and changes (read-only)"),
    Key("l", "logs", "Logs", tooltip="logs of the selected worker (stdout and stderr)"),
    Key("d", "dump", "Dump", acts=True,
        tooltip="dump the stacks of the selected worker (faulthandler, py-spy)"),
    Key("M", "memory", "CUDA memory snapshot", show=False, acts=True,
        tooltip="the selected worker's CUDA memory snapshot, into rank-N/memory/"),
    Key("o", "profile", "Profile", show=False, acts=True,
        tooltip="profile the selected worker or all: a trace of its next steps"),
    Key("e", "events", "Events", show=False, tooltip="events: every event of the run, from the first"),
    Key("a", "alerts", "Alerts", show=False,
        tooltip="every standing finding and alert, whole (since when, what it cost, what to do)"),
    Key("slash", "filter", "Filter", tooltip="filter the rows by rank, pid, state or cause"),
    Key("escape", "clear_filter", "Clear the filter", show=False, key_display="Esc",
        tooltip="clear the filter"),
    Key("s", "sort", "Sort by the next column", show=False,
        tooltip="sort by the next column (rank, state, step, loss, ...)"),
    Key("f", "fold", "Fold / unfold the selected worker", show=False,
        tooltip="fold or unfold the children of the selected worker"),
    Key("F", "fold_all", "Fold / unfold all", show=False,
        tooltip="fold or unfold the children of every worker"),
)

# A replay's cursor (tui.replay_app). Priority: the cursor moves on the detail, logs and GPU
# screens too (a modal screen stops the App's other bindings); the replay's check_action keeps
# them off dialogs, whose inputs want the keys. Off the footer: the timeline strip says them
# (`summary`), and the footer keeps ? and q at 80 columns. A group is what the strip says.
_STEP, _JUMP, _ENDS = Binding.Group("step"), Binding.Group("jump"), Binding.Group("")
CURSOR: tuple[Key, ...] = (
    Key("comma", "cursor('step', -1)", "Step back", key_display=",", priority=True, show=False,
        group=_STEP, tooltip="replay: one event back"),
    Key("full_stop", "cursor('step', 1)", "Step on", key_display=".", priority=True, show=False,
        group=_STEP, tooltip="replay: one event on"),
    Key("left_square_bracket", "cursor('jump', -1)", "Previous finding", key_display="[", priority=True,
        show=False, group=_JUMP, tooltip="replay: to the last failure, stall, restart or alert before"),
    Key("right_square_bracket", "cursor('jump', 1)", "Next finding", key_display="]", priority=True,
        show=False, group=_JUMP, tooltip="replay: to the next failure, stall, restart or alert"),
    # Over the table's own Home/End (first/last row): here they are the run's start and end.
    Key("home", "cursor('start', 0)", "Run's start", key_display="Home", priority=True, show=False,
        group=_ENDS, tooltip="replay: the run's start"),
    Key("end", "cursor('end', 0)", "Run's end", key_display="End", priority=True, show=False,
        group=_ENDS, tooltip="replay: the run's end"),
)

ACTING = frozenset(k.action for k in LIVE if k.acts)  # the actions of the keys that act


def _on_one_worker(key: str, word: str) -> Key:
    """A key of LIVE as the detail view binds it: on the worker it shows (one that acts goes
    through the view's act, which leaves the footer where nothing can act), shown in its footer
    with the word it has there."""
    k = next(k for k in LIVE if k.key == key)
    return dataclasses.replace(k, action=f"act('{k.action}')" if k.acts else f"app.{k.action}",
                               description=word, show=True)


# The detail view's keys (tui.screens.detail): its own, then LIVE's keys that act on one worker,
# in its footer's words (it has room for more of them than the main screen).
DETAIL: tuple[Key, ...] = (
    Key("escape,q,enter", "close", "Back", tooltip="back to the worker table"),
    Key("y", "log_scale", "Log/linear", tooltip="the loss plot on a log or linear scale"),
    *(_on_one_worker(key, word) for key, word in
      (("p", "Pause/resume"), ("d", "Dump stacks"), ("k", "Kill"), ("r", "Restart"), ("l", "Logs"))),
)


def offered(keys: Iterable[Key], can_act: bool) -> list[Key]:
    """The keys the help and the palette offer: all of them on a live run, else those that do
    not act."""
    return [k for k in keys if can_act or not k.acts]


def said(k: Key, can_act: bool) -> str:
    """The sentence the help and the palette show for a key: its read-only one where nothing
    can act and it has one."""
    return k.read_only if k.read_only and not can_act else k.tooltip


def off_footer(keys: Iterable[Key]) -> list[Key]:
    """The keys that act and show in the footer, bound again off it (a replay: room for what
    it has; pressed, they still say why they cannot act)."""
    return [dataclasses.replace(k, show=False) for k in keys if k.acts and k.show]


def summary(keys: Sequence[Key]) -> list[str]:
    """Each group's keys and its word, in table order: [", . step", "[ ] jump", "Home End"]."""
    out: dict[Binding.Group | None, list[str]] = {}
    for k in keys:
        out.setdefault(k.group, []).append(k.key_display or k.key)
    return [" ".join(shown + ([g.description] if g is not None and g.description else []))
            for g, shown in out.items()]
