"""A stand-in for the supervisor's channel hub, for the worker side's tests: every message of
every connection, in order, read off a real Listener (the worker's sender connects to it as
to a supervisor); and a worker started the way the supervisor starts one (the start-up hook's
folder on PYTHONPATH, the channel's variables)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from multiprocessing.connection import Listener
from pathlib import Path

from mpwatch.contract import protocol
from mpwatch.supervisor.spawn import INJECT_DIR
from tests.helpers import ROOT

KEY = os.urandom(16)


class Hub:
    def __init__(self, tmp_path: Path):
        self.address = str(tmp_path / "chan")
        self.listener = Listener(self.address, family="AF_UNIX", authkey=KEY)
        self.msgs: list[dict] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn) -> None:
        while True:
            try:
                msg = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            with self.lock:
                self.msgs.append(msg)

    def ooms(self) -> list[dict]:
        with self.lock:
            return [r for m in self.msgs if m["t"] == "batch" for r in m.get("oom", ())]

    def steps(self) -> list[int]:
        with self.lock:
            return [e[1] for m in self.msgs if m["t"] == "batch" for e in m["reports"] if e[1] is not None]

    def env(self, **more: str) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=os.pathsep.join([INJECT_DIR, str(ROOT)]),
                    **{protocol.ENV_ADDRESS: self.address, protocol.ENV_AUTHKEY: KEY.hex(),
                       protocol.ENV_RANK: "0", protocol.ENV_FLUSH: "0.05"}, **more)

    def start(self, argv: list[str], **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, *argv], env=self.env(**env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
