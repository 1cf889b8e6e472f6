"""The run's start-up process (one per node): it imports once what every worker imports (torch
and what torch imports at a worker's first optimizer, and what `--preload MODULE` names), then
forks each worker the supervisor asks for, as multiprocessing's forkserver does with its preload
list. A worker forked here is what `python SCRIPT` (or `python -m MODULE`) would have been: see
`_become` for each thing a child puts right before the script's first line runs.

Started by the supervisor (supervisor.preload.forkserver) as `python -c 'exec(input())' [PAD]`,
the line on its stdin loading this file and calling `main(FD, SUPERVISOR_PID, MODULES, FOLLOW)`: FD
is one end of a SOCK_SEQPACKET socket pair, one JSON message a packet, the worker's stdout and
stderr riding along a spawn request (SCM_RIGHTS). Its command line is as long as the workers' (PAD), and
its environment ends with PAD_VAR: room for a child to show its own in /proc/PID/cmdline and
/proc/PID/environ (`_proc_view`), where ps, psutil and the run's marks read them.

It says `ready` (or `failed`, and exits: the supervisor starts its workers by exec), then serves
`spawn` requests and reports each child's exit. It touches no CUDA, starts no thread, and never
imports mpwatch (whose channel is set up at import, from the environment: a child imports it
with its own). It dies with its supervisor (the parent-death signal) and takes its children
along (theirs).

Standard library only; loaded by file, as `_mpwatch_forkserver`.
"""
import gc
import json
import os
import select
import signal
import socket
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_MSG = 1 << 20  # the largest request (a worker's environment rides in it)
OUT_MAX = 1 << 16  # start-up output replayed into each worker (what its own start would have printed)
PAD_VAR = "MPWATCH_FORKSERVER_PAD"  # the last of its environment: room for each child's own
PR_SET_PDEATHSIG = 1
# What a preloaded module's own code imports in its workers: torch imports its compiler's front end
# at the first optimizer, DDP model or torch.compile a worker builds (the first call of a function
# under torch._disable_dynamo), 1 CPU-s a worker (2-3 on a busy machine), paid again by each restart.
# Imported after it where the supervisor says the workers build one (`follow`: its sources name
# one, supervisor.preload.detect), softly: where it fails, the workers import it themselves.
FOLLOWERS = {"torch": ("torch._dynamo",)}
# Signals whose disposition a child restores to what this interpreter had at its start.
SIGNALS = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


def _send(sock: socket.socket, msg: "dict[str, Any]", fds: "list[int] | None" = None) -> None:
    data = json.dumps(msg, separators=(",", ":")).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def _parent_death() -> None:
    """SIGKILL when the parent dies (Linux); exit now if it is already gone."""
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent or parent == 1:
        os._exit(1)


def _startup_output() -> "tuple[bytes, bytes]":
    """What this interpreter printed while it started (a user's sitecustomize, a preload's
    warnings): each worker's own start would have printed it, so each child prints it again."""
    out = []
    for fd in (1, 2):
        try:
            out.append(os.pread(fd, OUT_MAX, 0))
        except OSError:
            out.append(b"")
    return out[0], out[1]


def _preload(modules: "list[str]", loaded: "list[str]", follow: bool) -> "str | None":
    """Import each module, then (with `follow`) softly what follows it (FOLLOWERS), adding each
    imported to `loaded`; why the forkserver cannot serve, or None."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - a failed preload is said, never raised
            return f"--preload {name}: {type(exc).__name__}: {exc}"[:500]
        loaded.append(name)
    for name in modules if follow else ():
        for extra in FOLLOWERS.get(name, ()):
            if extra in loaded:
                continue
            try:
                importlib.import_module(extra)
            except BaseException:  # noqa: BLE001 - each worker imports it (or fails to) for itself
                continue
            loaded.append(extra)
    if "mpwatch" in sys.modules:
        return "a preload imported mpwatch (each worker must set up its own channel)"
    import threading

    if threading.active_count() > 1:
        return f"a preload started a thread ({', '.join(t.name for t in threading.enumerate()[1:])})"
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return "a preload initialised CUDA (a forked child cannot use it)"
    if not hasattr(_hook(), "boot_forked"):
        return "mpwatch's start-up hook is not loaded (worker.boot is not on PYTHONPATH)"
    return None


def _hook() -> "Any":
    """mpwatch's start-up hook as this interpreter loaded it (under its own name once a user's
    sitecustomize took `sitecustomize`)."""
    return sys.modules.get("_mpwatch_sitecustomize") or sys.modules.get("sitecustomize")


def main(fd: int, supervisor: int, modules: "list[str]", follow: bool = False) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # its boot line came on stdin; a worker's stdin is /dev/null
    os.close(null)
    # as this interpreter started: what each child restores, whatever a preload changed
    start = {"dispositions": {int(s): signal.getsignal(s) for s in SIGNALS}, "path": list(sys.path)}
    sock = socket.socket(fileno=fd)
    if os.getppid() != supervisor:
        os._exit(1)
    _parent_death()
    t0 = time.monotonic()
    loaded: list[str] = []
    why = _preload(modules, loaded, follow)
    if why is not None:
        _send(sock, {"t": "failed", "why": why})
        os._exit(0)
    gc.collect()
    gc.freeze()  # the preloaded objects stay out of every child's collections: their pages stay shared
    sys.stdout.flush()
    sys.stderr.flush()
    _send(sock, {"t": "ready", "pid": os.getpid(), "modules": loaded, "seconds": time.monotonic() - t0,
                 "tasks": len(os.listdir("/proc/self/task"))})
    job = Server(sock, start, _startup_output()).serve()
    _become(job)  # returns only in a forked child: the worker it is to be


class Server:
    """The serving loop: spawn requests in, children's exits out."""

    def __init__(self, sock: socket.socket, start: "dict[str, Any]", output: "tuple[bytes, bytes]"):
        self.sock = sock
        self.start = start
        self.output = output
        self.children: dict[int, int | None] = {}  # pid -> its pidfd (None: polled)
        self.poll = select.poll()
        self.poll.register(sock.fileno(), select.POLLIN)
        self.by_fd: dict[int, int] = {}  # pidfd -> pid

    def serve(self) -> "dict[str, Any]":
        """Until the supervisor closes its end (then exit); in a forked child, its job."""
        while True:
            timeout = 50 if any(fd is None for fd in self.children.values()) else None
            for fd, _ in self.poll.poll(timeout):
                if fd == self.sock.fileno():
                    job = self._request()
                    if job is not None:
                        return job
            self._reap()

    def _request(self) -> "dict[str, Any] | None":
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, MAX_MSG, 4)
        except OSError:
            data, fds = b"", []
        if not data:
            os._exit(0)  # the supervisor is done with us (or gone)
        try:
            msg = json.loads(data)
            if msg.get("t") != "spawn" or len(fds) != 2:
                raise ValueError("not a spawn request with its stdout and stderr")
        except ValueError as exc:
            for f in fds:
                os.close(f)
            _send(self.sock, {"t": "refused", "id": None, "why": str(exc)[:300]})
            return None
        return self._fork(msg, fds)

    def _fork(self, msg: "dict[str, Any]", fds: "list[int]") -> "dict[str, Any] | None":
        sys.stdout.flush()
        sys.stderr.flush()
        led_r, led_w = os.pipe()  # closed by the child once it leads its own session
        try:
            pid = os.fork()
        except OSError as exc:
            for f in (*fds, led_r, led_w):
                os.close(f)
            _send(self.sock, {"t": "refused", "id": msg.get("id"), "why": f"fork: {exc.strerror}"})
            return None
        if pid == 0:
            os.close(led_r)
            return dict(msg, **self.start, fds=fds, output=self.output, led=led_w,
                        server=self.sock, pidfds=list(self.by_fd))
        for f in (*fds, led_w):
            os.close(f)
        os.read(led_r, 1)  # its session exists before the supervisor hears of its pid (a kill finds it)
        os.close(led_r)
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):
            pidfd = None  # no pidfd (an old kernel): polled
        self.children[pid] = pidfd
        if pidfd is not None:
            self.by_fd[pidfd] = pid
            self.poll.register(pidfd, select.POLLIN)
        _send(self.sock, {"t": "spawned", "id": msg.get("id"), "pid": pid})
        return None

    def _reap(self) -> None:
        for pid, pidfd in list(self.children.items()):
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                got, status = pid, 255 << 8
            if got == 0:
                continue
            del self.children[pid]
            if pidfd is not None:
                self.poll.unregister(pidfd)
                del self.by_fd[pidfd]
                os.close(pidfd)
            _send(self.sock, {"t": "exit", "pid": pid, "status": status})


# ---------------------------------------------------------------------- the child ----
def _become(job: "dict[str, Any]") -> None:
    """In a forked child: become the worker, then run its script as `python` would."""
    try:
        how, what = _prepare(job)
    except BaseException as exc:  # noqa: BLE001 - a child that cannot start says why, as exec would
        os.write(2, f"mpwatch: the forked worker could not start: {type(exc).__name__}: {exc}\n".encode())
        os._exit(127)
    _run(how, what, job)


def _compiled(path: str) -> "Any":
    """The script's code; one that cannot be read ends the process as python's start does."""
    try:
        with open(path, "rb") as f:
            source = f.read()
    except OSError as exc:
        sys.stderr.write(f"{sys.executable}: can't open file {path!r}: [Errno {exc.errno}] {exc.strerror}\n")
        sys.stderr.flush()
        os._exit(2)
    return compile(source, path, "exec", dont_inherit=True)


def _prepare(job: "dict[str, Any]") -> "tuple[str, Any]":
    """Everything `python SCRIPT` would have had before its first line, in order: its own
    session, the parent-death signal, none of the forkserver's descriptors, its output files,
    cwd, umask, limits, signal dispositions, environment, argv, path, the start-up hook's work."""
    os.setsid()
    os.close(job["led"])
    _parent_death()
    for fd in (job["server"].detach(), *job["pidfds"]):  # detached: the socket object never closes it again
        os.close(fd)
    _streams(job["fds"], job["output"])
    os.chdir(job["cwd"])
    if job.get("umask") is not None:
        os.umask(job["umask"])
    _limits(job.get("rlimits") or [])
    _signals(job["dispositions"])
    os.environ.clear()
    os.environ.update(job["env"])
    _proc_view(job["argv"], job["env"])
    _reseed()
    how = _main(job)  # argv, sys.path, __main__ first: the hook's imports see the worker's path
    _boot()
    return how


def _streams(fds: "list[int]", output: "tuple[bytes, bytes]") -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    for src, dst in ((null, 0), (fds[0], 1), (fds[1], 2)):
        if src != dst:
            os.dup2(src, dst)
            os.close(src)
    for fd, data in ((1, output[0]), (2, output[1])):
        if data:
            os.write(fd, data)


def _limits(limits: "list[list[int]]") -> None:
    import resource

    for res, soft, hard in limits:
        try:
            if resource.getrlimit(res) != (soft, hard):
                resource.setrlimit(res, (soft, hard))
        except (OSError, ValueError):
            pass  # past what this process may set: as the supervisor's own exec would have failed to


def _signals(dispositions: "dict[int, Any]") -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig, handler in dispositions.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass


def _proc_view(argv: "list[str]", env: "dict[str, str]") -> None:
    """/proc/self/cmdline and /proc/self/environ as the worker's exec would have made them: its
    command line written over this process's (the forkserver's, as long: its PAD), and its
    environment into PAD_VAR's room after the forkserver's own (whose strings stay where they
    are: a library may hold a pointer into them). Readers see the worker's values last."""
    try:
        import ctypes

        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        arg_start, arg_end, env_start, env_end = (int(x) for x in fields[45:49])
    except (OSError, ValueError, ImportError):
        return
    args = [os.fsencode(a) for a in argv]
    size = arg_end - arg_start
    block = b"\0".join(args) + b"\0"
    if len(block) >= size:  # as long (or longer: cut)
        block = block[:size - 1] + b"\0"
    else:  # shorter: one title, as setproctitle writes it (the kernel shows it up to its NUL)
        title = b" ".join(args)[:size - 1]
        block = title + b"\0" + b" " * (size - len(title) - 1)
    ctypes.memmove(arg_start, block, size)
    area = ctypes.string_at(env_start, env_end - env_start)
    mark = PAD_VAR.encode() + b"="
    pad = area.rfind(b"\0" + mark)
    if pad < 0:
        return
    at = pad + 1 + len(mark)
    room = len(area) - at
    out = b"\0"
    for k, v in sorted(env.items(), key=lambda kv: not kv[0].startswith("MPWATCH_")):  # the run's marks first
        entry = os.fsencode(f"{k}={v}") + b"\0"
        if len(out) + len(entry) > room:
            break
        out += entry
    ctypes.memmove(env_start + at, out + b"\0" * (room - len(out)), room)


def _reseed() -> None:
    """Each process of `python SCRIPT` seeds its generators from the OS: so does each child
    (random reseeds itself at a fork; numpy's global generator, once imported, does not)."""
    nprandom = sys.modules.get("numpy.random")
    if nprandom is not None:
        try:
            nprandom.seed()
        except Exception:  # noqa: BLE001 - never fail a worker's start on a generator
            pass


def _boot() -> None:
    """The start-up hook's work for this worker (worker.boot.sitecustomize), with its environment."""
    _hook().boot_forked()


def _main(job: "dict[str, Any]") -> "tuple[str, Any]":
    """How to run __main__ and its module: ("module", MODULE) run as `python -m` runs it (runpy),
    ("path", PATH) a directory or a zip file (runpy.run_path, as python runs those), else
    ("script", PATH) compiled and run in a fresh __main__ (no frame of runpy in its tracebacks)."""
    argv = job["argv"]
    import builtins
    import types

    sys.orig_argv = list(argv)  # what exec would have run: [python, SCRIPT, ...], [python, -m, MODULE, ...]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins  # type: ignore[attr-defined]  # as __main__ has it
    main.__annotations__ = {}
    sys.modules["__main__"] = main
    if job["launch"] == "module":
        sys.argv = ["-m", *argv[3:]]
        sys.path[:] = [os.getcwd(), *job["path"]]
        return "module", argv[2]
    path = os.path.abspath(argv[1])
    sys.argv = list(argv[1:])
    sys.path[:] = [os.path.dirname(os.path.realpath(path)), *job["path"]]
    import zipfile

    if os.path.isdir(path) or zipfile.is_zipfile(path):
        sys.path[:] = list(job["path"])  # run_path puts the path first, as python does
        return "path", argv[1]
    from importlib.machinery import SourceFileLoader

    main.__dict__.update(__file__=path, __cached__=None, __loader__=SourceFileLoader("__main__", path),
                         __package__=None, __spec__=None)
    return "script", path


def _run(how: str, what: "Any", job: "dict[str, Any]") -> None:
    """Run it; an uncaught exception (a SyntaxError too) is printed by sys.excepthook without this
    file's frames and ends the process as Python's own top level does (exit 1; KeyboardInterrupt:
    by SIGINT). A script that cannot be read ends as python's own start does (exit 2)."""
    try:
        if how == "script":
            exec(_compiled(what), sys.modules["__main__"].__dict__)
        else:
            import runpy

            if how == "module":
                runpy._run_module_as_main(what, alter_argv=True)  # type: ignore[attr-defined]  # python -m's
            else:
                runpy.run_path(what, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the worker's own uncaught exception
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == __file__:  # none of this file's
            tb = tb.tb_next
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        sys.excepthook = lambda *a: None
        raise exc.with_traceback(None) from None
