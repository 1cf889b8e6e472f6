"""The second half of scripts/gpu-check: the TUI's screen of a real contention run.

Runs `demo/contention.py` (every rank pinned to GPU 0, by mistake) under `mpwatch --headless`,
waits until the supervisor sees both ranks' GPU memory and the collision, then reads the TUI's
screen the way a user would see it: through tmux where the machine has it, else through
Textual's headless driver (GPU servers often lack tmux). The screen must show the collision on
GPU 0's row and each rank's GPU memory in its row, as `ctl status --json` has them.

    python scripts/gpu_screen.py [--timeout SECONDS] [--size 120x40]

Exit 0 when the screen holds, 1 when it does not, 2 when this machine cannot run it.
The functions `capture` and `missing` are also what tests/e2e/test_gpu_screen_check.py runs
against a scripted NVML, so this script's screen logic is tested where there is no GPU.
"""
from __future__ import annotations

import argparse
import asyncio
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mpwatch.tui.render.view import gpu_text  # noqa: E402  (after the path: the checkout's mpwatch)

COLLISION = "r0,1"  # GPU 0's row names both ranks; the collision mark follows it
_SVG_TEXT = re.compile(r'<text[^>]*?x="([\d.]+)"[^>]*?clip-path="url\(#[\w-]*?-line-(\d+)\)"[^>]*>(.*?)</text>',
                       re.S)


def say(msg: str) -> None:
    print(f"gpu-check (screen): {msg}", flush=True)


def ctl_status(run_dir: Path, env: dict[str, str]) -> dict[str, Any] | None:
    res = subprocess.run([sys.executable, "-m", "mpwatch", "ctl", "--run", str(run_dir), "status", "--json"],
                         capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    return json.loads(res.stdout) if res.returncode == 0 else None


def expected(st: dict[str, Any]) -> list[str] | None:
    """What the main screen must show for this status, or None while the data is not there."""
    ws = st["workers"]
    if len(ws) < 2 or any(not w["gpu"] or w["gpu"]["mem_bytes"] is None for w in ws):
        return None
    if not any(a["kind"] == "contention" for g in st["gpus"] for a in g["alerts"]):
        return None
    return [COLLISION] + [gpu_text(w["gpu"]) for w in ws]  # "0 19.6G" ("0:1 19.6G" on a MIG slice)


def missing(screen: str, want: list[str]) -> list[str]:
    """The expected texts the screen lacks; the collision must be on a GPU row."""
    gone = [w for w in want if w not in screen]
    # A GPU row has its utilization: a percentage, or "n/a" on a MIG slice (MIG reports none)
    rows = [ln for ln in screen.splitlines() if COLLISION in ln and ("%" in ln or " n/a " in ln)]
    if COLLISION not in gone and not rows:
        gone.append(f"{COLLISION} on a GPU row")
    return gone


# ------------------------------------------------------------------ capture ----
def svg_text(svg: str) -> str:
    """The characters of a Textual screenshot (SVG), line by line."""
    lines: dict[int, list[tuple[float, str]]] = {}
    for m in _SVG_TEXT.finditer(svg):
        text = html.unescape(m.group(3)).replace("\xa0", " ")  # the SVG's spaces are non-breaking
        lines.setdefault(int(m.group(2)), []).append((float(m.group(1)), text))
    if not lines:
        return ""
    return "\n".join("".join(t for _, t in sorted(lines.get(i, []))) for i in range(max(lines) + 1))


def capture_tmux(run_dir: Path, size: tuple[int, int], env: dict[str, str], done: Callable[[str], bool],
                 timeout: float) -> str:
    """`mpwatch attach RUN` in a tmux pane of its own server; the pane's text once `done` holds."""
    sock = f"mpwatch-gpu-check-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    tmux = ["tmux", "-L", sock]
    cmd = f"{sys.executable} -m mpwatch attach --no-mouse {run_dir}"
    envs = [f"{k}={v}" for k, v in env.items() if k in ("PATH", "HOME", "PYTHONPATH", "MPWATCH_TMPDIR",
                                                        "XDG_RUNTIME_DIR")]
    subprocess.run([*tmux, "-f", "/dev/null", "new-session", "-d", "-x", str(size[0]), "-y", str(size[1]),
                    "env", *envs, "LANG=C.UTF-8", "TERM=xterm-256color", "sh", "-c", cmd], check=True, timeout=30)
    try:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True,
                                    timeout=30).stdout
            if done(screen):
                break
            time.sleep(0.5)
        return screen
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)


def capture_headless(run_dir: Path, size: tuple[int, int], done: Callable[[str], bool], timeout: float) -> str:
    """The same TUI under Textual's headless driver, read from its screenshot."""
    from mpwatch.sources.local import Client
    from mpwatch.tui.render import glyphs
    from mpwatch.tui.app import MpwatchApp

    async def run() -> str:
        client = Client.at(run_dir)
        app = MpwatchApp(client, run_dir, glyphs=glyphs.UNICODE, notices=False)
        screen = ""
        try:
            async with app.run_test(size=size) as pilot:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    await pilot.pause(0.5)
                    screen = svg_text(app.export_screenshot())
                    if app.snapshots and done(screen):
                        break
                if app.poller is not None:
                    app.poller.stop()
        finally:
            client.close()
        return screen

    return asyncio.run(run())


def capture(run_dir: Path, size: tuple[int, int], env: dict[str, str], done: Callable[[str], bool],
            timeout: float, how: str = "auto") -> tuple[str, str]:
    """(how it was read, the screen): tmux where there is one, else the headless driver."""
    if how == "tmux" or (how == "auto" and shutil.which("tmux")):
        return "tmux", capture_tmux(run_dir, size, env, done, timeout)
    return "textual headless driver", capture_headless(run_dir, size, done, timeout)


# --------------------------------------------------------------------- main ----
def preflight() -> str | None:
    """Why this machine cannot run the check, or None. NVML only: no CUDA context here."""
    try:
        import textual  # noqa: F401
    except ImportError:
        return "textual is not installed (the TUI's screen cannot be drawn)"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            n = pynvml.nvmlDeviceGetCount()
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - no library, no driver: one line
        return f"NVML does not start: {exc}"
    return None if n else "NVML sees no GPU"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu_screen.py")
    p.add_argument("--timeout", type=float, default=150.0)
    p.add_argument("--size", default="120x40")
    p.add_argument("--how", choices=("auto", "tmux", "headless"), default="auto")
    ns = p.parse_args(argv)
    size = tuple(int(x) for x in ns.size.split("x"))
    why = preflight()
    if why:
        say(f"cannot run here: {why}")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="mpwatch-gpu-screen-"))
    run_dir = tmp / "run"
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "mpwatch", "--headless", "-n", "2", "--run-dir", str(run_dir), "--grace", "5",
           "--gpu-interval", "0.5", str(ROOT / "demo" / "contention.py"), "--steps", "100000", "--max-gb", "2"]
    say("starting: " + " ".join(cmd))
    with open(tmp / "mpwatch.err", "wb") as log:
        sup = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=tmp,
                               start_new_session=True)
    deadline = time.monotonic() + ns.timeout
    try:
        want = None
        while want is None and time.monotonic() < deadline and sup.poll() is None:
            st = ctl_status(run_dir, env) if (run_dir / "control.json").exists() else None
            want = expected(st) if st else None
            time.sleep(0.5)
        if want is None:
            say(f"FAILED: the supervisor never showed both ranks' GPU memory and the collision; see {tmp}")
            return 1
        time.sleep(3.0)  # the demo stops growing at --max-gb: let its memory settle before comparing

        def done(screen: str) -> bool:
            st = ctl_status(run_dir, env)
            w = expected(st) if st else None
            return w is not None and not missing(screen, w)

        how, screen = capture(run_dir, size, env, done, max(deadline - time.monotonic(), 10.0), ns.how)
        want = expected(ctl_status(run_dir, env) or {"workers": [], "gpus": []}) or want
        say(f"the screen, read through {how}:\n" + screen)
        gone = missing(screen, want)
        if gone:
            say(f"FAILED: the screen lacks {gone} (expected from ctl status: {want}); run directory {run_dir}")
            return 1
        say(f"OK: the screen shows the collision ({COLLISION} on GPU 0's row) and each rank's GPU memory "
            f"({', '.join(want[1:])})")
        return 0
    finally:
        if sup.poll() is None:
            subprocess.run([sys.executable, "-m", "mpwatch", "ctl", "--run", str(run_dir), "stop"],
                           capture_output=True, env=env, timeout=60)
            try:
                sup.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sup.kill()


if __name__ == "__main__":
    sys.exit(main())
