"""What a rank's stderr says it died of: the exception a Python traceback ends with, found from
the traceback's end (its last frame), so that a message of many lines (torch.load's weights_only
refusal, a c10d error) is named by its type and its first line, never by its last. Pure text in,
one line out; the supervisor's exit causes (supervisor.workers.exits) and the post-mortem of an
older run's events (rundir.postmortem) use it, on the caller's thread. Bounded whatever it is
fed (an event's stderr_tail in a crafted events.jsonl may hold lines of megabytes): the last
LINES_MAX lines are read, each to LINE_MAX characters, and no pattern backtracks past a bound.
"""
from __future__ import annotations

import re

from mpwatch.rundir.layout import LOG_MARK, LOG_MARK_END

LINES_MAX = 2000  # the last lines of a tail read (supervisor.workers.reaping.CAUSE_LINES)
LINE_MAX = 4096  # characters of a line read (rundir.textfiles.LINE_KEEP: a log's line as read back)
# torch's prefix on each line of a rank's error
RANK_PREFIX = re.compile(r"^\[rank[0-9]{1,9}\]:\s?", re.ASCII)
# gloo's "[.../pair.cc:545] " (the path bounded: a line of "[[[[" costs no more than its length times 512)
_SOURCE_AT = re.compile(r"\[[^\]\s]{1,512}\.(?:cc|cpp|cu|h|hpp):[0-9]{1,9}\]\s*")
_BLURB = re.compile(r"\.\s+This is typically caused by .*$")  # gloo's advice after the message
# a colour a message carries (torch bolds), raw or made printable
_SGR = re.compile(r"(?:\x1b|\?)\[[0-9;]{0,32}m")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>[0-9]{1,9})', re.ASCII)  # a traceback's frame
_SYNTAX = ("SyntaxError", "IndentationError", "TabError")
_NOT_AN_ERROR = ("File ", "^", "~", "Traceback (most recent call last)")
# A profiler's own log line in the process's stderr (Kineto, torch.profiler's engine, writes them
# as a profile starts and stops: "ERROR:2026-12-06 06:53:39 18157:18157 DeviceProperties.cpp:56]
# gpuGetDeviceCount failed with code 35", USDT: and STAGE: lines): the tool's words, never the rank's.
TOOL_NOISE = re.compile(r"^(?:\[rank\d+\]:\s?)?(?:ERROR|WARNING|INFO|DEBUG|STAGE|USDT):\d{4}-\d\d-\d\d "
                        r"\d\d:\d\d:\d\d \d+:\d+ [\w.]+\.(?:cpp|cc|cu|h|hpp):\d+\] ")


def is_mark(line: str) -> bool:
    """mpwatch's own line in a rank's log (before a restart or a resize): never a cause."""
    return line.startswith(LOG_MARK) and line.endswith(LOG_MARK_END)


def is_tool_noise(line: str) -> bool:
    """A profiler's own log line (TOOL_NOISE): never a cause, nor a rank's error line."""
    return TOOL_NOISE.match(line.strip()) is not None


def own_output(tail: list[str]) -> list[str]:
    """The lines of a log tail the current process wrote: after mpwatch's last marker
    (a restart or a resize starts a new process there), less a profiler's own log lines."""
    marks = [i for i, line in enumerate(tail) if is_mark(line.strip())]
    return [ln for ln in (tail[marks[-1] + 1:] if marks else tail) if not is_tool_noise(ln)]


def clean(line: str) -> str:
    """An error line as a cause: without torch's [rankN] prefix, colours, a C++ source location
    or gloo's advice."""
    line = _SGR.sub("", _SOURCE_AT.sub("", RANK_PREFIX.sub("", line[:LINE_MAX].strip())))
    return _BLURB.sub("", line).rstrip(".") if _BLURB.search(line) else line


def error_line(tail: list[str]) -> str | None:
    """The line a user wants first from a crash: the exception the last traceback ends with
    (`module.Type: the first line of its message`, however many lines the message has), else
    the last line of its own that is no frame (a crash without a traceback). A syntax error
    says where: its file and line are on a line of their own above it ("SyntaxError: invalid
    syntax (train.py:12)")."""
    return _said(tail, traceback_only=False)


def exception_line(tail: list[str]) -> str | None:
    """The exception the last traceback in `tail` ends with; None when there is none."""
    return _said(tail, traceback_only=True)


def _said(tail: list[str], traceback_only: bool) -> str | None:
    lines = [RANK_PREFIX.sub("", ln[:LINE_MAX].rstrip()) for ln in tail[-LINES_MAX:] if not is_tool_noise(ln)]
    found = _after_last_frame(lines)
    if found is None and not traceback_only:
        found = _last_own_line(lines)
    if found is None:
        return None
    i, line = found
    return clean(line) + (_where(lines[:i]) if line.startswith(_SYNTAX) else "")


def _after_last_frame(lines: list[str]) -> tuple[int, str] | None:
    """The exception line below the traceback's last frame: the first line there that is not
    indented (the frame's source and its ^~~ markers are); a bare `Type:` takes the message's
    first line from below it."""
    last = next((i for i in range(len(lines) - 1, -1, -1) if _FRAME.match(lines[i])), None)
    if last is None:
        return None
    for i in range(last + 1, len(lines)):
        s = lines[i]
        if not s.strip() or s[0] in " \t" or is_mark(s.strip()):
            continue
        if s.endswith(":") and ": " not in s:  # `raise E("\n...")`: the message starts below
            more = next((ln.strip() for ln in lines[i + 1:] if ln.strip()), "")
            return i, f"{s} {more}".rstrip()
        return i, s
    return None  # a frame with no exception below it (faulthandler's dump, or cut off)


def _last_own_line(lines: list[str]) -> tuple[int, str] | None:
    for i in range(len(lines) - 1, -1, -1):
        s = lines[i].strip()
        if s and not is_mark(s) and not s.startswith(_NOT_AN_ERROR):
            return i, s
    return None


def _where(above: list[str]) -> str:
    """' (file.py:12)' from the last 'File "...", line N' line above, else ''."""
    for line in reversed(above):
        m = _FRAME.match(line)
        if m:
            return f" ({m.group('file').rsplit('/', 1)[-1]}:{m.group('line')})"
    return ""
