"""The TUI under load, in a real terminal (a 160x48 tmux pane, UTF-8):

- 256 workers reporting 100 times a second, as synthetic snapshots (bench/synthetic.py):
  the real app, fed a source whose every worker changes on every poll: the TUI's own cost,
  on a machine where nothing else competes for the CPU; with no GPU, and with 8 GPUs whose
  rows, sparklines (two minutes of history) and alerts move too, side by side in one run.
- the merged view of several nodes (sources.multinode's MergedSource over synthetic nodes): 4
  nodes x 64 ranks, and 16 nodes x 64 ranks (1024 ranks in one TUI).
- real workers (64 and 256; 32 with --quick) at 100 reports/s under a headless supervisor,
  with `mpwatch attach` in the pane: at 256 the same load for real, where the TUI competes
  with 256 workers for the machine's cores.

The TUI's CPU share is psutil's user+system time of the TUI process over a window, as a
percent of one core. Key-to-screen is the time from the key going to tmux to the TUI's
output reaching tmux, both through one control-mode client: for `s` (sort, local to the
TUI) the header's "sort: ..." text, for `p` (a round trip through the source) the status
line's "paused rank 0" / "resumed rank 0". Control-mode delivery adds a little, so these
are upper bounds.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil

from bench import measure
from bench.harness import row
from bench.synthetic import RATE  # the real reporters run at the synthetic source's rate

TARGET_CPU_PCT = 15.0
TARGET_KEY_MS = 100.0

REPORTER = r'''
import os, time
import mpwatch
period, step, next_t = 0.01, 0, time.monotonic()
while True:
    with mpwatch.phase("compute"):
        pass
    mpwatch.report(step=step, loss=1.0 / (step + 1))
    step += 1
    next_t += period
    delay = next_t - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    elif delay < -1.0:
        next_t = time.monotonic()
'''


def _unescape(data: bytes) -> str:
    """Control mode's %output payload: bytes below 32 and backslash are written as \\ooo."""
    return re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), data).decode("utf-8", "replace")


class Pane:
    """A tmux pane running the TUI. Keys go in and the TUI's output comes back through one
    control-mode client (tmux -C): no process is started per key press or per look at the
    screen, which on a loaded machine would cost more than what is measured."""

    def __init__(self):
        self.sock = f"mpwatch-bench-tui-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.ctl = None
        self.out: list[tuple[float, str]] = []  # (arrival, text) of each %output line
        self.cond = threading.Condition()

    def tmux(self, *args) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True,
                              timeout=30).stdout

    def start(self, cmd: list[str], env: dict):
        envs = [f"{k}={v}" for k, v in env.items()]
        self.tmux("-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "48", "-s", "b",
                  "env", "-i", *envs, *cmd)
        self.tmux("set-option", "-g", "window-size", "manual")  # a control client must not resize it

    def control(self):
        """Attach the control-mode client (once the TUI is up)."""
        self.ctl = subprocess.Popen(["tmux", "-L", self.sock, "-C", "attach", "-t", "b"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.ctl.stdout:
            if line.startswith(b"%output "):
                text = _unescape(line.split(b" ", 2)[2])
                with self.cond:
                    self.out.append((time.perf_counter(), text))
                    self.cond.notify_all()

    def press(self, key: str, needle: str, timeout: float) -> float:
        """Seconds from sending `key` to the TUI writing `needle` to the terminal."""
        with self.cond:
            mark = len(self.out)
        t0 = time.perf_counter()
        self.ctl.stdin.write(f"send-keys -t b {key}\n".encode())
        self.ctl.stdin.flush()
        with self.cond:
            while True:
                for t, text in self.out[mark:]:
                    if needle in text:
                        return t - t0
                mark = len(self.out)
                left = timeout - (time.perf_counter() - t0)
                if left <= 0:
                    raise TimeoutError(f"timed out waiting for {needle!r} after {key!r}")
                self.cond.wait(left)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "b")

    def key(self, k: str):
        self.tmux("send-keys", "-t", "b", k)

    def wait(self, pred, timeout: float, what: str) -> float:
        """Seconds until the screen satisfies pred."""
        t0 = time.perf_counter()
        while True:
            if pred(self.screen()):
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise TimeoutError(f"timed out waiting for {what}")
            time.sleep(0.003)

    def kill(self):
        if self.ctl is not None:
            self.ctl.kill()
            self.ctl.wait()
        self.tmux("kill-server")
        # kill-server leaves the socket file behind
        base = os.environ.get("TMUX_TMPDIR", "/tmp")
        try:
            os.unlink(os.path.join(base, f"tmux-{os.getuid()}", self.sock))
        except OSError:
            pass


def _tui_process(pane_pid: int, marker: str) -> psutil.Process | None:
    try:
        procs = [psutil.Process(pane_pid)] + psutil.Process(pane_pid).children(recursive=True)
    except psutil.Error:
        return None
    for p in procs:
        try:
            if marker in " ".join(p.cmdline()):
                return p
        except psutil.Error:
            continue
    return None


def measure_tui(cmd: list[str], marker: str, n: int, window: float, reps: int, env_extra=None,
                polls=None) -> dict:
    """Start the TUI in a 160x48 tmux pane and measure it: the TUI process's CPU share over
    `window`, then `reps` presses of `s` (local: the header's sort label) and of `p` (a round
    trip through the source: the status line's reply)."""
    pane = Pane()
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"),
           "LANG": "C.UTF-8", "TERM": "xterm-256color", **(env_extra or {})}
    try:
        pane.start(cmd, env)
        pane.wait(lambda s: f"{n} workers" in s and "sort: rank" in s, 60, "the TUI")
        pane_pid = int(pane.tmux("list-panes", "-t", "b", "-F", "#{pane_pid}").split()[0])
        tui = measure.wait_for(lambda: _tui_process(pane_pid, marker), 10, what="the TUI process")
        time.sleep(2.0)  # settle: the first fill of the table is not the steady state
        c0, t0, p0 = tui.cpu_times(), time.monotonic(), polls() if polls else None
        time.sleep(window)
        c1, t1, p1 = tui.cpu_times(), time.monotonic(), polls() if polls else None
        cpu_pct = 100.0 * ((c1.user + c1.system) - (c0.user + c0.system)) / (t1 - t0)
        rate = (p1 - p0) / (t1 - t0) if polls else None
        load = os.getloadavg()[0]
        pane.control()
        sorts = ["state", "step", "loss", "speed", "heartbeat", "cpu", "rss", "rank"]
        key_ms = []
        for i in range(reps):
            key_ms.append(1000 * pane.press("s", f"sort: {sorts[i % len(sorts)]}", 10))
            time.sleep(0.3)
        while "sort: rank" not in pane.screen():
            pane.key("s")
            time.sleep(0.3)
        act_ms = []
        for i in range(reps):
            act_ms.append(1000 * pane.press("p", f"{'paused' if i % 2 == 0 else 'resumed'} rank 0", 10))
            time.sleep(0.3)
        pane.key("q")
        pane.key("d")
    finally:
        pane.kill()
    return {"cpu": cpu_pct, "keys": key_ms, "acts": act_ms, "rate": rate, "load": load}


def rows_for(m: dict, what: str, cmd: str, window: float, reps: int, how: str, act_how: str) -> list[dict]:
    key_med, act_med = measure.median(m["keys"]), measure.median(m["acts"])
    return [
        row(f"TUI CPU share ({what})", cmd, mpwatch=round(m["cpu"], 1), unit="% of one core",
            target=f"< {TARGET_CPU_PCT:g}", ok=m["cpu"] < TARGET_CPU_PCT,
            note=f"psutil user+system of the TUI process over {window:g}s; {how}; load average "
                 f"{m['load']:.1f} on {os.cpu_count()} cores"),
        row(f"TUI key-to-screen, local key 's' ({what})", cmd, mpwatch=round(key_med, 1), unit="ms",
            target=f"< {TARGET_KEY_MS:g}", ok=key_med < TARGET_KEY_MS,
            note=f"median of {reps}, max {max(m['keys']):.0f} ms; key to the new sort label in the TUI's output"),
        row(f"TUI key-to-screen, 'p' ({what})", cmd, mpwatch=round(act_med, 1),
            unit="ms", target=f"< {TARGET_KEY_MS:g}", ok=act_med < TARGET_KEY_MS,
            note=f"median of {reps}, max {max(m['acts']):.0f} ms; {act_how}"),
    ]


def run(quick: bool = False) -> list[dict]:
    sizes = [32] if quick else [64, 256]
    window = 5.0 if quick else 15.0
    reps = 5 if quick else 10
    if shutil.which("tmux") is None:
        return [row("TUI under load", note="skipped: tmux is not installed")]
    syn = synthetic(256, 0, window, reps)
    rows = rows_for(syn, "256 workers x 100 reports/s, synthetic snapshots", "python -m bench.synthetic 256",
                    window, reps, f"{syn['rate']:.1f} refreshes/s (at most 4; fewer when a refresh would take "
                    f"the TUI past 10% of a core); every worker's step, loss, heartbeat and phases change in "
                    f"every snapshot (bench/synthetic.py)",
                    "the synthetic source answers at once: the TUI's own cost")
    gpu = synthetic(256, 8, window, reps)
    cmd = "python -m bench.synthetic 256 --gpus 8"
    what = "256 workers x 100 reports/s and 8 GPUs with history, synthetic snapshots"
    gpu_rows = rows_for(gpu, what, cmd, window, reps,
                        f"{gpu['rate']:.1f} refreshes/s; as the row without GPUs, plus 8 GPU rows whose memory "
                        f"bars, utilization and two-minute sparklines move, and each worker's GPU cell",
                        "the synthetic source answers at once: the TUI's own cost")
    for r, base in zip(gpu_rows, (syn["cpu"], measure.median(syn["keys"]), measure.median(syn["acts"])),
                       strict=True):
        r.update(alternative=round(base, 1), alt_name="the same without GPUs, this run",
                 ratio=r["mpwatch"] / base if base else None)
    rows += gpu_rows
    rows += nodes_rows(syn, window, reps)
    if not quick:
        rows += nodes_rows(syn, window, reps, nodes=16, per=64)  # issue 43: 1024 ranks of 16 nodes in one TUI
    for n in sizes:
        rows += real_rows(n, window, reps)
    return rows


def nodes_rows(base: dict, window: float, reps: int, nodes: int = 4, per: int = 64) -> list[dict]:
    """The merged view of `nodes` nodes of `per` ranks each, beside one run of 256."""
    m = synthetic(nodes * per, 0, window, reps, nodes=nodes)
    what = f"{nodes} nodes x {per} ranks x 100 reports/s merged, synthetic snapshots"
    out = rows_for(m, what, f"python -m bench.synthetic {nodes * per} --nodes {nodes}", window, reps,
                   f"{m['rate']:.1f} refreshes/s; the real MergedSource (a thread per node, the merge, the "
                   f"cross-node straggler analysis) over {nodes} synthetic nodes, NODE column and a header "
                   f"line per node", "through MergedSource to the rank's node (answers at once)")
    for r, b in zip(out, (base["cpu"], measure.median(base["keys"]), measure.median(base["acts"])), strict=True):
        r.update(alternative=round(b, 1), alt_name="one run of 256, this run", ratio=r["mpwatch"] / b if b else None)
    return out


def synthetic(n: int, gpus: int, window: float, reps: int, nodes: int = 0) -> dict:
    """The TUI on bench/synthetic.py's snapshots of n workers (and gpus GPUs; over `nodes`
    merged nodes)."""
    root = str(Path(__file__).resolve().parent.parent)
    with measure.scratch("tui-syn") as d:
        polls_file = d / "polls"

        def polls():
            try:
                return int(polls_file.read_text() or 0)
            except (OSError, ValueError):
                return 0
        cmd = [sys.executable, "-m", "bench.synthetic", str(n), str(polls_file), "--gpus", str(gpus),
               *(["--nodes", str(nodes)] if nodes else [])]
        return measure_tui(cmd, "bench.synthetic", n, window, reps, env_extra={"PYTHONPATH": root}, polls=polls)


def real_rows(n: int, window: float, reps: int) -> list[dict]:
    what = f"{n} workers x {RATE:.0f} reports/s"
    with measure.scratch("tui") as d:
        script = measure.write_script(d, "reporter.py", REPORTER)
        with measure.Headless(d, script, n=n, opts=["--grace", "2"]) as h:
            # On a saturated machine not every worker may report in time: go on with
            # most of them, and say how many were reporting.
            def reporting():
                return sum(w["step"] is not None for w in h.status()["workers"])
            deadline = time.monotonic() + 60 + n
            while reporting() < n and time.monotonic() < deadline:
                time.sleep(1.0)
            n_reporting = reporting()
            if n_reporting < n // 2:
                raise TimeoutError(f"only {n_reporting} of {n} workers reported: the machine is saturated")
            real = measure_tui([*measure.mpwatch_cmd(), "attach", str(h.run_dir)], "attach", n, window, reps)
    if n_reporting < n:
        what += f", {n_reporting} reporting"
    return rows_for(real, what, f"mpwatch attach RUN  # {what}", window, reps,
                    "real workers under a headless supervisor, on the same cores as the TUI (with "
                    "more runnable processes than cores, a key waits for a CPU before the TUI can "
                    "draw: compare the synthetic rows)",
                    "through the supervisor: the status line shows its reply")


if __name__ == "__main__":
    import json
    import sys

    for r in run(quick="--quick" in sys.argv):
        print(json.dumps(r))
