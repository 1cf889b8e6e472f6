"""Watching other machines over ssh, against a localhost sshd of the bench's own
(tests/remote/sshd.py: 127.0.0.1 and 127.0.0.2, a runtime directory each, so each address is
a machine of its own), side by side with the same on this machine in one run:

- attach to the first screen: from typing `mpwatch attach A:RUN B:RUN` in a 160x48 tmux pane
  (two nodes of 4 ranks, each reached through ssh and `mpwatch bridge`) to both nodes' ranks
  on screen; beside it `mpwatch attach RUN` of one of the runs here.
- one request: `mpwatch ctl --host A status --json` (ssh, login, the bridge's start, the
  handshake, the reply) beside `mpwatch ctl status --json` here.

On localhost the network costs nothing: these are ssh's and mpwatch's own costs, the floor of
what a real network adds its round trips to.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time

from bench import measure
from bench.bench_tui import Pane
from bench.harness import row

REPORTER = r'''
import time
import mpwatch
step = 0
while True:
    mpwatch.report(step=step, loss=1.0 / (step + 1))
    step += 1
    time.sleep(0.05)
'''
N = 4  # ranks a node


def _first_screen(cmd: list[str], env: dict[str, str], pred, what: str) -> float:
    pane = Pane()
    try:
        t0 = time.perf_counter()
        pane.start(cmd, env)
        pane.wait(pred, 60, what)
        return time.perf_counter() - t0
    finally:
        pane.key("q")
        pane.key("d")
        pane.kill()


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, env=env, timeout=60)
    if res.returncode != 0:
        raise RuntimeError(f"{measure.shown(cmd)} failed: {res.stderr.decode()[-300:]}")
    return time.perf_counter() - t0


def run(quick: bool = False) -> list[dict]:
    if shutil.which("tmux") is None:
        return [row("attach over ssh", note="skipped: tmux is not installed")]
    from tests.remote.sshd import ADDRESSES, REMOTE_MPWATCH, Sshd, why_no_sshd

    why = why_no_sshd()
    if why is not None:
        return [row("attach over ssh", note=f"skipped: {why}")]
    reps = 3 if quick else 7
    with measure.scratch("ssh") as d:
        sshd = Sshd(d / "ssh").start()
        runs = []
        try:
            script = measure.write_script(d, "reporter.py", REPORTER)
            for i, addr in enumerate(ADDRESSES):
                env = measure.clean_env(XDG_RUNTIME_DIR=str(sshd.runtime[addr]))
                runs.append(measure.Headless(d, script, n=N, env=env, name=f"run{i}").start())
            ids = [h.status()["run"]["id"] for h in runs]
            measure.wait_for(lambda: all(w["step"] is not None for h in runs for w in h.status()["workers"]),
                             60, what="every rank reporting")
            return _measure(sshd, runs, ids, reps, ADDRESSES, REMOTE_MPWATCH)
        finally:
            for h in runs:
                h.cleanup()
            sshd.kill_all()


def _measure(sshd, runs, ids, reps, addrs, remote) -> list[dict]:
    base = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8",
            "TERM": "xterm-256color", "MPWATCH_SSH": f"ssh -F {sshd.client_config}"}
    if os.environ.get("PYTHONPATH"):
        base["PYTHONPATH"] = os.environ["PYTHONPATH"]
    here = {**base, "XDG_RUNTIME_DIR": str(sshd.runtime[addrs[0]])}
    mp = measure.mpwatch_cmd()
    remote_cmd = [*mp, "attach", "--remote-mpwatch", remote, *(f"{a}:{i}" for a, i in zip(addrs, ids, strict=True))]
    local_cmd = [*mp, "attach", str(runs[0].run_dir)]
    both = f"{2 * N} workers"
    times: dict[str, list[float]] = {"ssh": [], "local": [], "ctl_ssh": [], "ctl_local": [], "login": []}
    for _, name in measure.alternated(reps, ["ssh", "local"]):
        if name == "ssh":
            times["ssh"].append(_first_screen(remote_cmd, base, lambda s: both in s and "node 1 127.0.0.2" in s
                                              and s.count("● running") >= 2 * N, "both nodes' ranks"))
        else:
            times["local"].append(_first_screen(local_cmd, here, lambda s: f"{N} workers" in s
                                                and s.count("● running") >= N, "the ranks"))
    ctl_env = {**os.environ, **base}
    for _, name in measure.alternated(reps, ["ctl_ssh", "ctl_local", "login"]):
        if name == "login":  # the floor: ssh's own start and login, running nothing
            times[name].append(_timed(["ssh", "-F", str(sshd.client_config), "-T", addrs[0], "true"], ctl_env))
        elif name == "ctl_ssh":
            times[name].append(_timed([*mp, "ctl", "--host", addrs[0], "--remote-mpwatch", remote, "--run", ids[0],
                                       "status", "--json"], ctl_env))
        else:
            times[name].append(_timed([*mp, "ctl", "--run", ids[0], "status", "--json"], {**ctl_env, **here}))
    ssh_ms, local_ms = 1000 * measure.median(times["ssh"]), 1000 * measure.median(times["local"])
    c_ssh, c_local = 1000 * measure.median(times["ctl_ssh"]), 1000 * measure.median(times["ctl_local"])
    login = 1000 * measure.median(times["login"])
    load = os.getloadavg()[0]
    return [
        row("attach over ssh to the first screen (2 nodes x 4 ranks, localhost sshd)",
            "mpwatch attach A:RUN B:RUN  # MPWATCH_SSH='ssh -F cfg'", mpwatch=round(ssh_ms), unit="ms",
            alternative=round(local_ms), alt_name="mpwatch attach RUN (one node, here), this run",
            note=f"median of {reps}, alternated; from the command's start in a 160x48 tmux pane to every rank of "
                 f"both nodes on screen (two ssh logins and bridges, merged); max {1000 * max(times['ssh']):.0f} "
                 f"ms; load average {load:.1f} on {os.cpu_count()} cores"),
        row("one request over ssh: ctl --host A status --json",
            "mpwatch ctl --host A --run RUN status --json", mpwatch=round(c_ssh), unit="ms",
            alternative=round(c_local), alt_name="mpwatch ctl --run RUN status --json (here), this run",
            note=f"median of {reps}, alternated; the whole command: ssh's start and login, the bridge's "
                 f"start, the handshake, one status of {N} ranks; `ssh -T A true` alone (the login, the "
                 f"floor) took {login:.0f} ms"),
    ]


if __name__ == "__main__":
    import json
    import sys

    for r in run(quick="--quick" in sys.argv):
        print(json.dumps(r))
