"""The bridge's wire: what `mpwatch bridge` (cli.bridge, on the run's machine) and
RemoteClient (sources.remote.client, on the viewer's) say to each other over ssh's standard
input and output. Shared by both ends; no threads of its own.

One JSON object a line (UTF-8; json.dumps never writes a raw newline, and frames are never
pickle: a confused peer can only fail to decode). First the handshake, each side one line:

    client -> bridge  {"t": "hello", "proto": "mpwatch-bridge", "min": 1, "max": 1, "mpwatch": "0.1.0"}
    bridge -> client  {"t": "hello", "proto": "mpwatch-bridge", "v": 1, "mpwatch": "0.1.0",
                       "host": ..., "user": ..., "run": {"run_id", "run_dir", "pid"}}
                      or the same with "error": "<one line>" instead of "run" (then it exits)

The bridge picks the highest version both speak; a client refuses a hello outside its own
range. Then requests, answered in any order (several may be in flight):

    client -> bridge  {"id": 7, "cmd": "status", "tail": 12}            (a control command)
    bridge -> client  {"id": 7, "reply": <the supervisor's reply, as it sent it>}
                      {"id": 7, "reply": {"ok": false, "error": ...}, "gone": {"final", "info"}}

"gone" says the run has ended on that machine: final is its final.json (None when missing)
and info its run.json. Lines a login shell prints before the bridge starts (a .bashrc that
echoes) are skipped by the client, up to NOISE_LINES.
"""
from __future__ import annotations

import json
from typing import Any, TypedDict

from mpwatch import __version__
from mpwatch.contract import jsonread, protocol

PROTO = "mpwatch-bridge"
MIN_VERSION = 1  # the oldest bridge protocol this mpwatch speaks
VERSION = 1  # the newest
NOISE_LINES = 200  # lines before the hello that are not it (shell start-up output)
MAX_REQUEST = protocol.MAX_FRAME
MAX_REPLY = protocol.MAX_REPLY + 4096  # a supervisor's reply, wrapped


class BridgeRun(TypedDict):
    """The run a bridge serves, as its machine resolved it."""

    run_id: str
    run_dir: str  # a path on the bridge's machine
    pid: int  # its supervisor's


def encode(msg: dict[str, Any]) -> bytes:
    """One line; protocol.BadFrame for a value nested too deep for JSON (never a RecursionError)."""
    try:
        return protocol.encode_lossy(msg) + b"\n"
    except RecursionError:
        raise protocol.BadFrame("a value nested too deep to encode") from None


def decode(line: bytes) -> dict[str, Any]:
    """One line as an object; anything else is a protocol.BadFrame."""
    try:
        msg = jsonread.loads(line)  # bounded: nesting, digits, UTF-8
    except ValueError as exc:
        raise protocol.BadFrame(f"not JSON: {exc}") from None
    if not isinstance(msg, dict):
        raise protocol.BadFrame("not an object")
    return msg


def client_hello() -> bytes:
    return encode({"t": "hello", "proto": PROTO, "min": MIN_VERSION, "max": VERSION, "mpwatch": __version__})


def is_hello(msg: dict[str, Any]) -> bool:
    return msg.get("t") == "hello" and msg.get("proto") == PROTO


def pick_version(hello: dict[str, Any]) -> int | str:
    """The version to speak with the peer that sent this client hello, or why there is none."""
    lo, hi = hello.get("min"), hello.get("max")
    if type(lo) is not int or type(hi) is not int or lo > hi:
        return "the client's hello names no protocol versions"
    v = min(hi, VERSION)
    if v < max(lo, MIN_VERSION):
        return (f"this mpwatch ({__version__}) speaks bridge protocol {MIN_VERSION}..{VERSION}, the client "
                f"({hello.get('mpwatch', '?')}) {lo}..{hi}: install the same mpwatch on both machines")
    return v


def check_version(hello: dict[str, Any]) -> str | None:
    """None when the bridge's hello names a version this client speaks, else why not."""
    v = hello.get("v")
    if type(v) is not int or not MIN_VERSION <= v <= VERSION:
        return (f"the remote mpwatch ({hello.get('mpwatch', '?')}) speaks bridge protocol {v}, this one "
                f"({__version__}) {MIN_VERSION}..{VERSION}: install the same mpwatch on both machines")
    return None


def wrap_reply(req_id: object, raw: bytes) -> bytes:
    """The supervisor's reply frame (one line of JSON) inside a reply line, not decoded."""
    return b'{"id":' + json.dumps(req_id).encode() + b',"reply":' + raw + b"}\n"
