"""The `mpwatch ctl` parser: its actions (status, pause...logs) and their arguments, each bad
value a cli.args UsageError. Used by cli (main) and cli.live, on the main thread; argparse only,
so `mpwatch --help` stays light."""
from __future__ import annotations

import argparse
import re
from collections.abc import Callable

from mpwatch.cli.args import ACTIONS, Parser, count, positive_int, rank, rank_target
from mpwatch.contract import INT_DIGITS, MAX_STEP, PROFILE_STEPS, PROFILE_STEPS_MAX
from mpwatch.text.safe import printable

# What `set` takes for a value, not an option, though it starts with a dash: every way Python
# spells a negative number (argparse's own pattern has no exponent, inf or nan: `set lr -inf`
# read as an unknown option, and VALUE as missing).
NEGATIVE_NUMBER = re.compile(r"^-(?:(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:e[-+]?\d+)?|inf(?:inity)?|nan)$",
                             re.IGNORECASE)


def _at_most(parse: Callable[[str], int], most: int, words: str) -> Callable[[str], int]:
    """`parse`, and a usage error past `most`, in `words` ({most}; {text}: what was typed, {v}: read)."""
    def check(text: str) -> int:
        typed = printable(text, 40)
        if text.isascii() and text.isdigit() and len(text) > INT_DIGITS:  # a bound's words, however long
            raise argparse.ArgumentTypeError(words.format(most=most, text=typed, v=typed))
        v = parse(text)
        if v > most:
            raise argparse.ArgumentTypeError(words.format(most=most, text=typed, v=v))
        return v
    return check


# --at-step S: a step from 0 to 2^53, the largest a request carries (contract.protocol)
at_step = _at_most(count, MAX_STEP,
                   "a step is at most 2^53 ({most}), the largest a request carries; got {text}")
profile_steps = _at_most(positive_int, PROFILE_STEPS_MAX,
                         "at most {most} steps (a trace of more is seldom read and may be gigabytes), "
                         "got {v}")


def ctl_parser() -> Parser:
    p = Parser(prog="mpwatch ctl", description="Control a live run; read any run's logs.")
    p.add_argument("--run", metavar="RUN", help="run id or directory (default: the live run; among "
                   "several, status and logs take the newest and every other action refuses)")
    sub = p.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser)
    sub.required = True
    st = sub.add_parser("status", help="workers' state")
    st.add_argument("--json", action="store_true")
    for a in ACTIONS:
        sp = sub.add_parser(a, help=f"{a} a rank or all")
        sp.add_argument("target", type=rank_target, metavar="RANK|all")
    rs = sub.add_parser("resize", help="change the number of workers")
    rs.add_argument("n", type=positive_int, metavar="N")
    sub.add_parser("stop", help="stop every worker and end the run")
    ck = sub.add_parser("checkpoint", help="ask a rank or all to checkpoint: mpwatch.should_checkpoint() "
                                           "returns True once there, at the same step on every rank")
    ck.add_argument("target", type=rank_target, metavar="RANK|all")
    ck.add_argument("--at-step", type=at_step, metavar="S",
                    help="at step S, at most 2^53 (default: soon, from the pace of the ranks that agree)")
    mem = sub.add_parser("memory", help="a rank (or all) writes torch's CUDA allocator snapshot into its "
                                        "folder (rank-N/memory/, for pytorch.org/memory_viz) at a step")
    mem.add_argument("target", type=rank_target, metavar="RANK|all")
    mem.add_argument("--at-step", type=at_step, metavar="S",
                     help="at step S, at most 2^53 (default: soon, from the pace of the ranks that agree)")
    pf = sub.add_parser("profile", help="profile a rank or all from their next step: torch.profiler for N "
                                         "steps, a Chrome trace in rank-N/profiles/ (py-spy for N seconds "
                                         "where torch is not imported)")
    pf.add_argument("target", type=rank_target, metavar="RANK|all")
    pf.add_argument("--steps", type=profile_steps, default=PROFILE_STEPS, metavar="N",
                    help=f"steps to profile, 1 to {PROFILE_STEPS_MAX} (default {PROFILE_STEPS})")
    pf.add_argument("--at-step", type=at_step, metavar="S", help="once step S is reported (default: soon)")
    tn = sub.add_parser("set", help="change a tunable (mpwatch.tunable) on every rank, at one step")
    tn.add_argument("name", metavar="NAME")
    tn.add_argument("value", metavar="VALUE", help="of the type the workers declared (int, float, str, "
                                                   "bool); a negative number as it is: -1e-3, -5")
    tn._negative_number_matcher = NEGATIVE_NUMBER  # argparse's hook for what reads as a number
    tn.add_argument("--at-step", type=at_step, metavar="S",
                    help="from step S on, at most 2^53 (default: soon)")
    lg = sub.add_parser("logs", help="a rank's stdout (or stderr) from the run directory; finished runs too")
    lg.add_argument("rank", type=rank, metavar="RANK")
    lg.add_argument("--stderr", action="store_true", help="stderr instead of stdout")
    lg.add_argument("--lines", type=count, default=50, metavar="N", help="the last N lines (default 50)")
    lg.add_argument("--follow", "-f", action="store_true", help="then print new lines until the run ends")
    return p
