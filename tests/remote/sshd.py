"""A real OpenSSH server of the test's own, on loopback addresses only.

`Sshd` makes a host key and user keys with ssh-keygen in a temporary folder, writes its own
sshd_config (a free port on 127.0.0.1 and 127.0.0.2, those keys, no passwords, no PAM) and
runs /usr/sbin/sshd -D -f it in the foreground; `stop()` kills it. The client side gets an
ssh config file of its own (the port, the identity, a known_hosts file holding this host
key only, StrictHostKeyChecking, BatchMode), handed to mpwatch as MPWATCH_SSH="ssh -F it":
nothing of the real ~/.ssh is read or changed.

Each address stands for a machine: sshd sets XDG_RUNTIME_DIR per address (Match
LocalAddress), so a bridge reached at 127.0.0.2 sees only the runs registered in node 1's
runtime directory, as a bridge on another machine would. PYTHONPATH is passed on so the
bridge runs this checkout's code.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT, descendants, kill_all, wait_for

SSHD = "/usr/sbin/sshd"
ADDRESSES = ("127.0.0.1", "127.0.0.2")
REMOTE_MPWATCH = f"{sys.executable} -m mpwatch"  # mpwatch is not on a non-interactive PATH here


def why_no_sshd() -> str | None:
    """None when a test sshd can be run here, else why not (the reason a test skips with)."""
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen")):
        if not tool or not os.access(tool, os.X_OK):
            return f"OpenSSH is not installed ({tool or 'ssh / ssh-keygen'} missing)"
    if os.geteuid() == 0 and not os.path.isdir("/run/sshd"):
        try:  # the privilege separation directory a root sshd needs (Debian's package makes it at boot)
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        except OSError as exc:
            return f"sshd needs /run/sshd and it cannot be made: {exc.strerror}"
    return None


def free_port() -> int:
    """A port free on every test address."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind((ADDRESSES[0], 0))
            port = s.getsockname()[1]
        try:
            for addr in ADDRESSES[1:]:
                with socket.socket() as s:
                    s.bind((addr, port))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port on the loopback addresses")


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
                   check=True, capture_output=True)
    return path


class Sshd:
    def __init__(self, folder: Path):
        self.dir = folder
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.host_key = keygen(folder / "host_key")
        self.user_key = keygen(folder / "user_key")
        self.stranger_key = keygen(folder / "stranger_key")  # not in authorized_keys
        (folder / "authorized_keys").write_text((folder / "user_key.pub").read_text())
        self.runtime = {addr: folder / f"xdg-{i}" for i, addr in enumerate(ADDRESSES)}
        for d in self.runtime.values():
            d.mkdir(mode=0o700, exist_ok=True)
        self.config = folder / "sshd_config"
        self.log = folder / "sshd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._write_config()
        self.client_config = self.ssh_config(self.user_key)

    def _write_config(self) -> None:
        pythonpath = os.environ.get("PYTHONPATH", str(ROOT))
        lines = [f"ListenAddress {a}:{self.port}" for a in ADDRESSES] + [
            f"HostKey {self.host_key}", f"AuthorizedKeysFile {self.dir / 'authorized_keys'}",
            "PidFile none", "UsePAM no", "StrictModes no", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
            "AllowTcpForwarding no", "X11Forwarding no", "PrintMotd no", "LogLevel VERBOSE",
            f"SetEnv PYTHONPATH={pythonpath} XDG_RUNTIME_DIR={self.runtime[ADDRESSES[0]]}"]
        for addr in ADDRESSES[1:]:
            lines += [f"Match LocalAddress {addr}",
                      f"  SetEnv PYTHONPATH={pythonpath} XDG_RUNTIME_DIR={self.runtime[addr]}"]
        self.config.write_text("\n".join(lines) + "\n")

    def ssh_config(self, identity: Path) -> Path:
        """A client config that trusts this server's key alone and offers `identity` alone."""
        known = self.dir / "known_hosts"
        key = (self.dir / "host_key.pub").read_text().split()
        known.write_text(",".join(f"[{a}]:{self.port}" for a in ADDRESSES) + f" {key[0]} {key[1]}\n")
        path = self.dir / f"ssh_config-{identity.name}"
        path.write_text("\n".join([
            "Host 127.0.0.*", f"  Port {self.port}", f"  IdentityFile {identity}", "  IdentitiesOnly yes",
            "  IdentityAgent none", f"  UserKnownHostsFile {known}", "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes", "  BatchMode yes", "  LogLevel ERROR",
            "Host *", "  ConnectTimeout 10"]) + "\n")
        return path

    def env(self, identity: Path | None = None) -> dict[str, str]:
        """The environment for an mpwatch that reaches this server's hosts."""
        cfg = self.client_config if identity is None else self.ssh_config(identity)
        return {**os.environ, "MPWATCH_SSH": f"ssh -F {cfg}"}

    def node_env(self, addr: str) -> dict[str, str]:
        """The environment of a supervisor "on" the machine at addr (its runtime directory)."""
        return {**os.environ, "XDG_RUNTIME_DIR": str(self.runtime[addr])}

    def start(self) -> Sshd:
        log = open(self.log, "ab")  # noqa: SIM115 - the child holds it
        with log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        wait_for(lambda: self.listening() or self.proc.poll() is not None, 20, what="sshd to listen")
        if self.proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        return self

    def listening(self) -> bool:
        try:
            with socket.create_connection((ADDRESSES[-1], self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        """Kill the listening daemon (sessions it already started go on, as on a real host)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill_all(self) -> None:
        """The end of a test: every session this daemon started, then the daemon."""
        if self.proc is not None:
            kill_all(descendants(self.proc.pid))
        self.stop()
