"""Loaded at start-up by every Python process of an mpwatch run (PYTHONPATH points here).

It does the two things a worker must have even when its script never imports mpwatch:
- a faulthandler on SIGUSR1 writing all threads' stacks to this rank's stack file, which
  works from C without the GIL (a blocked or spinning main thread still dumps);
- for a direct worker, a parent-death signal, so a SIGKILLed supervisor takes it along.
Then it hands over to any other sitecustomize further down sys.path. Runs at interpreter
start-up, on the main thread, before the script.
"""
import io  # already loaded at start-up: this hook imports nothing costly (typing) into every process
import os
import sys

_stack_file: "io.TextIOWrapper | None" = None  # kept open (and referenced) for faulthandler's C handler


def _mpwatch_boot() -> None:
    global _stack_file
    env = os.environ
    stack_file = env.get("MPWATCH_STACK_FILE")
    if stack_file:
        import faulthandler
        import signal

        try:
            f = open(stack_file, "a", buffering=1)  # noqa: SIM115 - open for the process's life
            faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
            _stack_file = f
        except (OSError, ValueError, RuntimeError):
            pass
    sup = env.get("MPWATCH_SUPERVISOR_PID")
    if sup and sys.platform.startswith("linux"):
        if os.getppid() == int(sup):
            try:
                import ctypes
                import signal

                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass
            # The supervisor may have died before prctl took effect: then we are orphaned.
            if os.getppid() != int(sup):
                os._exit(1)
            # Children of this worker see another parent and skip this block.


def _chain() -> None:
    # Let a sitecustomize of the user's environment run as it would have.
    here = os.path.dirname(os.path.abspath(__file__))
    mod = sys.modules.pop("sitecustomize", None)
    saved = sys.path[:]
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        import importlib

        try:
            importlib.import_module("sitecustomize")
        except ImportError:
            pass
    finally:
        sys.path[:] = saved
        if mod is not None:
            sys.modules["sitecustomize"] = mod


_mpwatch_boot()
_chain()
