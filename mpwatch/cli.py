"""mpwatch RUN | attach | ls | ctl: the command line.

Imports stay lazy: `mpwatch --help` and `mpwatch ctl` must start fast and never load
torch or textual; the supervisor is imported only to run one, the TUI only to show one.
Every bad input ends in one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

SUBCOMMANDS = ("ls", "attach", "ctl")
ACTIONS = ("pause", "resume", "kill", "restart", "dump")

EPILOG = """\
other commands:
  mpwatch ls [--json]                     live runs of this user
  mpwatch attach [RUN]                    open the TUI on a live run (default: the newest)
  mpwatch ctl [--run RUN] status [--json]
  mpwatch ctl [--run RUN] pause|resume|kill|restart|dump RANK|all
  mpwatch ctl [--run RUN] resize N
  mpwatch ctl [--run RUN] stop            stop every worker and end the run
RUN is a run id (see 'mpwatch ls') or a run directory.
"""


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse that reports errors in one line and exits 2."""

    def error(self, message):
        raise UsageError(message)


def _positive_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _count(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {v}")
    return v


def _seconds(text, allow_zero=False):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if v != v or v in (float("inf"), float("-inf")) or v < 0 or (v == 0 and not allow_zero):
        raise argparse.ArgumentTypeError(f"must be a {'non-negative' if allow_zero else 'positive'} "
                                         f"number of seconds, got {text}")
    return v


def _rank_target(text):
    if text == "all":
        return "all"
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a rank number or 'all', got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"a rank is not negative, got {v}")
    return v


def run_parser() -> Parser:
    p = Parser(prog="mpwatch", usage="mpwatch [options] SCRIPT [ARGS...]\n       mpwatch ls|attach|ctl ...",
               description="Launch and watch the worker processes of a PyTorch training script.",
               epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nprocs", type=_positive_int, default=None,
                   help="number of workers (default: visible NVIDIA GPUs, or 2 without any)")
    p.add_argument("--headless", action="store_true", help="no TUI: status lines on stderr")
    p.add_argument("--run-dir", metavar="DIR", help="run directory (default ./mpwatch-runs/<time>-<script>/)")
    p.add_argument("--max-restarts", type=_count, default=0, metavar="K",
                   help="restart a worker that exits non-zero up to K times (default 0)")
    p.add_argument("--stall-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                   help="a reporting worker silent this long is stalled (default 60)")
    p.add_argument("--grace", type=lambda t: _seconds(t, allow_zero=True), default=10.0, metavar="SECONDS",
                   help="time between SIGTERM and SIGKILL when stopping a worker (default 10)")
    p.add_argument("--resize-mode", choices=("restart", "independent"), default="restart",
                   help="restart: stop all and start N (collectives); independent: add/remove ranks")
    p.add_argument("--gpu-interval", type=_seconds, default=1.0, metavar="SECONDS",
                   help="GPU memory/utilization sampling interval (default 1)")
    p.add_argument("--no-mouse", action="store_true", help="TUI: do not capture the mouse")
    p.add_argument("--supervise-only", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run-id", help=argparse.SUPPRESS)
    p.add_argument("script", metavar="SCRIPT", help="the training script")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script")
    return p


def ctl_parser() -> Parser:
    p = Parser(prog="mpwatch ctl", description="Control a live run.")
    p.add_argument("--run", metavar="RUN", help="run id or directory (default: the newest live run)")
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    sub.required = True
    st = sub.add_parser("status", help="workers' state")
    st.add_argument("--json", action="store_true")
    for a in ACTIONS:
        sp = sub.add_parser(a, help=f"{a} a rank or all")
        sp.add_argument("target", type=_rank_target, metavar="RANK|all")
    rs = sub.add_parser("resize", help="change the number of workers")
    rs.add_argument("n", type=_positive_int, metavar="N")
    sub.add_parser("stop", help="stop every worker and end the run")
    return p


def die(msg: str, code: int = 2):
    print(f"mpwatch: error: {msg}", file=sys.stderr)
    return code


def default_nprocs() -> int:
    """Visible NVIDIA GPUs (CUDA_VISIBLE_DEVICES, else NVML), or 2 without any."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        ids = [x for x in vis.split(",") if x.strip() and x.strip() != "-1"]
        return len(ids) or 2
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() or 2
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library: the CPU default
        return 2


def check_script(path: str):
    if not os.path.exists(path):
        raise UsageError(f"script not found: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory, not a script")
    if not os.access(path, os.R_OK):
        raise UsageError(f"script is not readable: {path}")


# ------------------------------------------------------------------ commands ----
def cmd_run(ns) -> int:
    check_script(ns.script)
    if ns.run_dir is not None and os.path.exists(ns.run_dir) and not os.path.isdir(ns.run_dir):
        raise UsageError(f"--run-dir {ns.run_dir} exists and is not a directory")
    from mpwatch import registry
    from mpwatch.supervisor.core import Options, Run
    from mpwatch.supervisor.headless import Reporter

    opts = Options(script=ns.script, args=list(ns.args), nprocs=ns.nprocs or default_nprocs(),
                   run_dir=ns.run_dir, max_restarts=ns.max_restarts, stall_timeout=ns.stall_timeout,
                   grace=ns.grace, resize_mode=ns.resize_mode, gpu_interval=ns.gpu_interval,
                   run_id=ns.run_id)
    if not ns.headless and not ns.supervise_only:
        tui = _tui_launcher()
        if tui is not None:
            return tui(ns, opts)
    try:
        run = Run(opts, status_out=Reporter())
        run.setup()  # releases what it made when it fails
    except registry.RunError as exc:
        return die(str(exc))
    return run.serve()


def _tui_launcher():
    """The TUI's launcher when the TUI is installed, else None (headless then)."""
    try:
        from mpwatch.tui.launch import launch_with_tui
    except ImportError:
        return None
    return launch_with_tui


def cmd_ls(argv) -> int:
    p = Parser(prog="mpwatch ls", description="List live runs of this user.")
    p.add_argument("--json", action="store_true")
    ns = p.parse_args(argv)
    from mpwatch import registry

    try:
        entries = registry.live_runs()
    except registry.RunError as exc:
        return die(str(exc))
    if ns.json:
        print(json.dumps(entries, indent=1))
        return 0
    if not entries:
        print("no live runs")
        return 0
    import time

    print(f"{'RUN':40} {'PID':>7} {'WORKERS':>7}  {'STARTED':19}  DIR")
    for e in entries:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.get("started", 0)))
        print(f"{e['run_id']:40} {e['pid']:>7} {e.get('nprocs', '?'):>7}  {started:19}  {e['run_dir']}")
    return 0


def cmd_attach(argv) -> int:
    p = Parser(prog="mpwatch attach", description="Open the TUI on a live run.")
    p.add_argument("run", nargs="?", metavar="RUN", help="run id or directory (default: the newest)")
    p.add_argument("--no-mouse", action="store_true")
    ns = p.parse_args(argv)
    from mpwatch.client import Client, ClientError

    try:
        client = Client.connect(ns.run)
    except ClientError as exc:
        return die(str(exc))
    try:
        from mpwatch.tui.launch import attach_tui
    except ImportError:
        client.close()
        return die("the TUI is not installed (pip install textual); use 'mpwatch ctl status'")
    return attach_tui(client, mouse=not ns.no_mouse)


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}{unit}"
    return f"{v}{unit}"


def _fmt_bytes(n):
    if n is None:
        return "-"
    for unit in ("B", "K", "M", "G", "T"):
        if n < 1024:
            return f"{n:.0f}{unit}"
        n /= 1024
    return f"{n:.0f}P"


def _na_bytes(n):
    return "N/A" if n is None else _fmt_bytes(n)


def _na(v, unit=""):
    return "N/A" if v is None else f"{v:g}{unit}"


def _gpu_line(g: dict) -> str:
    """One GPU: N/A where NVML could not tell."""
    used, total = g.get("mem_used"), g.get("mem_total")
    pct = f" ({used / total:.0%})" if used is not None and total else ""
    return (f"GPU {g.get('index')}: {g.get('name') or 'N/A'} · mem {_na_bytes(used)}/{_na_bytes(total)}{pct}"
            f" · util {_na(g.get('util_gpu'), '%')} (mem {_na(g.get('util_mem'), '%')})"
            f" · {_na(g.get('temperature'), 'C')} · {_na(g.get('power_w'), 'W')}")


def _gpu_owner(p: dict) -> str:
    if p.get("rank") is not None:
        return f"rank {p['rank']}"
    if p.get("child_of") is not None:
        return f"child of rank {p['child_of']}: {p.get('cmd') or ''}"[:80]
    if not p.get("visible", True):
        return "not visible (another PID namespace)"
    return f"outside: {p.get('user') or '?'}: {p.get('cmd') or ''}"[:80]


def print_status(st: dict):
    r = st["run"]
    counts = ", ".join(f"{n} {s}" for s, n in sorted(r["counts"].items()))
    print(f"run {r['id']} ({r['state']}) · {r['script']} · up {r['uptime']:.0f}s · {counts} · "
          f"restarts {r['restarts']}")
    print(f"{'RANK':>4} {'PID':>7} {'STATE':10} {'STEP':>8} {'LOSS':>10} {'HB':>6} {'CPU%':>6} {'RSS':>6} "
          f"{'RESTARTS':>8}  CAUSE")
    for w in st["workers"]:
        hb = "none" if w["heartbeat"] == "none" else _fmt(w["heartbeat_age"], "s")
        print(f"{w['rank']:>4} {_fmt(w['pid']):>7} {w['state']:10} {_fmt(w['step']):>8} {_fmt(w['loss']):>10} "
              f"{hb:>6} {_fmt(w['cpu_percent']):>6} {_fmt_bytes(w['rss_bytes']):>6} {w['restarts']:>8}  "
              f"{w['cause'] or ''}")
        for c in w["children"]:
            print(f"{'':>4} {c['pid']:>7} {'└ ' + c['status']:10} {_fmt(c.get('step')):>8} "
                  f"{_fmt(c.get('loss')):>10} {'':>6} {_fmt(c['cpu_percent']):>6} {_fmt_bytes(c['rss_bytes']):>6}"
                  f"           {c.get('cmd', '')[:50]}")
        stl = w.get("stall") if w["state"] == "stalled" else None
        if stl:  # the hang diagnosis: what it does, where it is stuck, the dump to read
            since = r["started"] + r["uptime"] - stl["since"] if stl.get("since") else None  # wall clock
            print(f"{'':>4} stalled {_fmt(None if since is None else round(max(0.0, since), 1), 's')}: "
                  f"{stl.get('detail') or stl.get('kind') or ''}")
            if stl.get("where") or stl.get("innermost"):
                print(f"{'':>4} stuck in {stl.get('where') or stl.get('innermost')}"
                      + (f", waiting in {stl['collective']}" if stl.get("collective") else ""))
        if w.get("last_dump"):
            print(f"{'':>4} last dump: {w['last_dump']}")
    sg = st.get("straggler")
    if sg and sg.get("text"):
        print(("likely culprit: " if sg.get("culprits") else "hang: ") + sg["text"])
    if st.get("gpu_status"):
        print(f"GPU: {st['gpu_status']}")
    for g in st.get("gpus", []):
        print(_gpu_line(g))
        for p in g.get("processes", []):
            print(f"    pid {p['pid']:>7} {_na_bytes(p.get('mem_bytes')):>9}  {_gpu_owner(p)}")
        for a in g.get("alerts", []):
            print(f"  ! {a.get('message')}")
    for a in st.get("alerts", [])[-5:]:
        print(f"alert: {a['message']}")


def cmd_ctl(argv) -> int:
    ns = ctl_parser().parse_args(argv)
    from mpwatch.client import Client, ClientError

    try:
        with Client.connect(ns.run) as client:
            if ns.action == "status":
                st = client.status()
                if ns.json:
                    print(json.dumps(st, indent=1, default=str))
                else:
                    print_status(st)
            elif ns.action in ACTIONS:
                print(client.act(ns.action, ns.target))
            elif ns.action == "resize":
                print(client.resize(ns.n))
            elif ns.action == "stop":
                print(client.stop())
    except ClientError as exc:
        return die(str(exc))
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in SUBCOMMANDS:
            return {"ls": cmd_ls, "attach": cmd_attach, "ctl": cmd_ctl}[argv[0]](argv[1:])
        ns = run_parser().parse_args(argv)
        return cmd_run(ns)
    except UsageError as exc:
        return die(str(exc))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
