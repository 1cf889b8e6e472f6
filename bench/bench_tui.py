"""The TUI under load: N workers reporting 100 times a second (256; 32 with quick).

Measured on the real thing: a headless supervisor runs the workers, and `mpwatch attach`
runs in a tmux pane (a real terminal, 160x48, UTF-8). The TUI's CPU share is psutil's
user+system time of the TUI process over a window, as a percent of one core. Key-to-
screen is the time from `tmux send-keys` to capture-pane showing the effect: for `s`
(sort, local to the TUI) the header's "sort: ..." text, for `p` (a round trip through the
supervisor) the status line's "paused rank 0" / "resumed rank 0". The capture-pane
polling adds a few ms, so these are upper bounds.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import psutil

from bench import measure
from bench.harness import row

RATE = 100.0
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


class Pane:
    def __init__(self):
        self.sock = f"mpwatch-bench-tui-{os.getpid()}-{uuid.uuid4().hex[:6]}"

    def tmux(self, *args) -> str:
        return subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True,
                              timeout=30).stdout

    def start(self, cmd: list[str], env: dict):
        envs = [f"{k}={v}" for k, v in env.items()]
        self.tmux("-f", "/dev/null", "new-session", "-d", "-x", "160", "-y", "48", "-s", "b",
                  "env", "-i", *envs, *cmd)

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


class SyntheticSource:
    """Status snapshots of n workers whose steps, losses and heartbeats change on every
    poll, as they do when every worker reports 100 times a second; answers the control
    requests a key sends. For measuring the TUI's own cost at a scale this machine cannot
    run for real; its rows say so."""

    def __init__(self, n: int):
        self.n, self.t0, self.paused = n, time.monotonic(), set()

    def status(self) -> dict:
        t = time.monotonic() - self.t0
        workers = []
        for r in range(self.n):
            step = int(t * RATE) + r
            workers.append({
                "rank": r, "pid": 100000 + r, "state": "paused" if r in self.paused else "running",
                "step": step, "loss": 1.0 / (step + 1), "steps_per_s": RATE - (r % 7), "metrics": {},
                "heartbeat_age": round((t * 7 + r) % 0.05, 3), "heartbeat": "ok", "cpu_percent": 50.0 + r % 40,
                "rss_bytes": (200 + r) * 2**20, "restarts": 0, "exit_code": None, "signal": None, "cause": None,
                "reports": step, "dropped": 0, "phases": {"data": t * 0.2, "compute": t * 0.7},
                "uptime": t, "loss_tail": [1.0 / (step + 40 - i) for i in range(32)],
                "stall": None, "last_dump": None, "unkillable": None, "children": []})
        return {"run": {"id": "synthetic", "script": "train.py", "args": [], "state": "running",
                        "uptime": t, "counts": {"running": self.n - len(self.paused), "paused": len(self.paused)},
                        "restarts": 0, "exit_code": None},
                "workers": workers, "gpus": [], "gpu_status": "no NVIDIA GPU found", "alerts": [],
                "events_seq": 0}

    def events(self, since=0):
        return {"events": [], "seq": 0}

    def act(self, cmd, target):
        (self.paused.add if cmd == "pause" else self.paused.discard)(target)
        return f"{cmd}d rank {target}" if cmd == "pause" else f"{cmd}d rank {target}"


def synthetic(n: int, window: float, reps: int) -> dict:
    """In-process: the app on a headless driver at 160x48, fed SyntheticSource."""
    import asyncio

    from mpwatch.tui import glyphs
    from mpwatch.tui.app import MpwatchApp

    async def main():
        app = MpwatchApp(SyntheticSource(n), glyphs=glyphs.UNICODE, notices=False)
        async with app.run_test(size=(160, 48)) as pilot:
            while app.snapshots < 3:
                await pilot.pause(0.05)
            c0, t0, s0 = time.process_time(), time.monotonic(), app.snapshots
            await pilot.pause(window)
            cpu = 100.0 * (time.process_time() - c0) / (time.monotonic() - t0)
            rate = (app.snapshots - s0) / (time.monotonic() - t0)
            keys = []
            for _ in range(reps):
                before = app.sort
                t = time.perf_counter()
                await pilot.press("s")
                while app.sort == before:
                    await pilot.pause(0.001)
                await pilot.pause()  # the screen update for the new order
                keys.append(1000 * (time.perf_counter() - t))
                await pilot.pause(0.2)
            return cpu, rate, keys

    return dict(zip(("cpu", "rate", "keys"), asyncio.run(main())))


def run(quick: bool = False) -> list[dict]:
    n = 32 if quick else 256
    window = 5.0 if quick else 15.0
    reps = 5 if quick else 10
    rows = []
    syn = synthetic(256, window, reps)
    syn_cmd = "MpwatchApp(SyntheticSource(256)).run_test(size=(160, 48))"
    rows.append(row("TUI CPU share, 256 workers (synthetic snapshots, headless driver)", syn_cmd,
                    mpwatch=round(syn["cpu"], 1), unit="% of one core", target=f"< {TARGET_CPU_PCT:g}",
                    ok=syn["cpu"] < TARGET_CPU_PCT,
                    note=f"{syn['rate']:.1f} snapshots/s applied; every worker changes every snapshot; "
                         f"includes the poller thread"))
    rows.append(row("TUI key-to-screen, 's' (256 workers, synthetic, headless driver)", syn_cmd,
                    mpwatch=round(measure.median(syn["keys"]), 1), unit="ms", target=f"< {TARGET_KEY_MS:g}",
                    ok=measure.median(syn["keys"]) < TARGET_KEY_MS,
                    note=f"median of {reps}, max {max(syn['keys']):.0f} ms; press to the app idle after "
                         f"its screen update"))
    what = f"{n} workers x {RATE:.0f} reports/s"
    if shutil.which("tmux") is None:
        return rows + [row(f"TUI under load ({what})", note="skipped: tmux is not installed")]
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
            pane = Pane()
            attach = [*measure.mpwatch_cmd(), "attach", str(h.run_dir)]
            env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"),
                   "LANG": "C.UTF-8", "TERM": "xterm-256color"}
            try:
                pane.start(attach, env)
                pane.wait(lambda s: f"{n} workers" in s and "sort: rank" in s, 60, "the TUI")
                pane_pid = int(pane.tmux("list-panes", "-t", "b", "-F", "#{pane_pid}").split()[0])
                tui = measure.wait_for(lambda: _tui_process(pane_pid, "attach"), 10, what="the TUI process")
                time.sleep(2.0)  # settle: the first fill of the table is not the steady state
                c0, t0 = tui.cpu_times(), time.monotonic()
                time.sleep(window)
                c1, t1 = tui.cpu_times(), time.monotonic()
                cpu_pct = 100.0 * ((c1.user + c1.system) - (c0.user + c0.system)) / (t1 - t0)
                sorts = ["state", "step", "loss", "speed", "heartbeat", "cpu", "rss", "rank"]
                key_ms = []
                for i in range(reps):
                    nxt = sorts[i % len(sorts)]
                    pane.key("s")
                    key_ms.append(1000 * pane.wait(lambda s: f"sort: {nxt}" in s, 10, f"sort: {nxt}"))
                    time.sleep(0.3)
                while "sort: rank" not in pane.screen():
                    pane.key("s")
                    time.sleep(0.3)
                act_ms = []
                for i in range(reps):
                    word = "paused" if i % 2 == 0 else "resumed"
                    pane.key("p")
                    act_ms.append(1000 * pane.wait(lambda s: f"{word} rank 0" in s, 10, f"{word} rank 0"))
                    time.sleep(0.3)
                pane.key("q")
                pane.key("d")
            finally:
                pane.kill()
    cmd = f"mpwatch attach RUN  # {what}, tmux 160x48"
    if n_reporting < n:
        what += f", {n_reporting} reporting"
    key_med, act_med = measure.median(key_ms), measure.median(act_ms)
    return rows + [
        row(f"TUI CPU share ({what})", cmd, mpwatch=round(cpu_pct, 1), unit="% of one core",
            target=f"< {TARGET_CPU_PCT:g}", ok=cpu_pct < TARGET_CPU_PCT,
            note=f"psutil user+system of the TUI process over {window:g}s"),
        row(f"TUI key-to-screen, local key 's' ({what})", cmd, mpwatch=round(key_med, 1), unit="ms",
            target=f"< {TARGET_KEY_MS:g}", ok=key_med < TARGET_KEY_MS,
            note=f"median of {reps}, max {max(key_ms):.0f} ms; send-keys to capture-pane"),
        row(f"TUI key-to-screen, 'p' through the supervisor ({what})", cmd, mpwatch=round(act_med, 1),
            unit="ms", target=f"< {TARGET_KEY_MS:g}", ok=act_med < TARGET_KEY_MS,
            note=f"median of {reps}, max {max(act_ms):.0f} ms; status line shows the supervisor's reply"),
    ]


if __name__ == "__main__":
    import json
    import sys

    for r in run(quick="--quick" in sys.argv):
        print(json.dumps(r))
