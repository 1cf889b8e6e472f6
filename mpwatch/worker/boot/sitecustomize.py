"""Loaded at start-up by every Python process of an mpwatch run (PYTHONPATH points here).

It does what a worker must have even when its script never imports mpwatch:
- a faulthandler on SIGUSR1 writing all threads' stacks to this rank's stack file, which
  works from C without the GIL (a blocked or spinning main thread still dumps);
- for a direct worker, a parent-death signal, so a SIGKILLed supervisor takes it along;
  any process of a run that starts when its supervisor is already gone exits at once.
- a finder on sys.meta_path that waits for `import torch` and, right after torch's own import,
  puts in the hooks of automatic steps (mpwatch.worker.auto; unless the run said --no-auto) and
  arms the CUDA memory forensics (mpwatch.worker.cuda_memory: they wait for CUDA's initialisation).
  Until then it costs one comparison per import; a process that never imports torch loads nothing.
Then it hands over to any other sitecustomize further down sys.path, which runs as it would
without mpwatch (see _chain). Runs at interpreter start-up, on the main thread, before the script.
"""
import io  # already loaded at start-up: this hook imports nothing costly (typing) into every process
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType

_stack_file: "io.TextIOWrapper | None" = None  # kept open (and referenced) for faulthandler's C handler


def _arm_dumps() -> None:
    """The stack dumps: faulthandler on SIGUSR1 into this rank's stack file."""
    global _stack_file
    stack_file = os.environ.get("MPWATCH_STACK_FILE")
    if stack_file:
        import faulthandler
        import signal

        try:
            f = open(stack_file, "a", buffering=1)  # noqa: SIM115 - open for the process's life
            faulthandler.register(signal.SIGUSR1, file=f, all_threads=True, chain=False)
            _stack_file = f
        except (OSError, ValueError, RuntimeError):
            pass


def _mpwatch_boot() -> None:
    _arm_dumps()
    env = os.environ
    sup = env.get("MPWATCH_SUPERVISOR_PID")
    if sup and sys.platform.startswith("linux"):
        try:
            sup_pid = int(sup)
        except ValueError:
            return
        if os.getppid() == sup_pid:
            try:
                import ctypes
                import signal

                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass
            # The supervisor may have died before prctl took effect: then we are orphaned.
            if os.getppid() != sup_pid:
                os._exit(1)
            # Children of this worker see another parent and skip this block.
        elif not _alive(sup_pid):
            # Started after its supervisor died (it was being started as the supervisor was
            # killed, or by a worker that outlived it): a run without its supervisor has no one
            # to stop it, so nothing of it starts. Its own children, whose parent is the
            # worker, pass here while the supervisor lives.
            os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


class _TorchFinder:
    """Waits for `import torch` on sys.meta_path, then leaves it: the finders after it find
    torch, and the loader they give runs mpwatch.worker.auto once torch's own code has run."""

    def find_spec(self, name: str, path: "Sequence[str] | None" = None,
                  target: "ModuleType | None" = None) -> "ModuleSpec | None":
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        real = getattr(loader, "exec_module", None)
        if loader is None or real is None:
            return spec

        def exec_module(module: "ModuleType") -> None:
            try:
                del loader.exec_module  # the loader as it was: this runs once
            except AttributeError:
                pass
            real(module)
            _after_torch(module)

        try:
            loader.exec_module = exec_module  # type: ignore[method-assign]  # this loader only: torch's
        except (AttributeError, TypeError):
            pass
        return spec


def _auto_wanted() -> bool:
    return os.environ.get("MPWATCH_AUTO_HOOKS") == "1"


def _memory_wanted() -> bool:  # protocol.ENV_CUDA_OOM, ENV_CUDA_HISTORY (not imported: this hook stays cheap)
    return os.environ.get("MPWATCH_CUDA_OOM") == "1" or os.environ.get("MPWATCH_CUDA_HISTORY", "0") != "0"


def _after_torch(torch: "ModuleType") -> None:
    if _auto_wanted():
        try:
            from mpwatch.worker.auto import install

            install(torch)
        except Exception as exc:  # noqa: BLE001 - never fail the script's import of torch
            sys.stderr.write(f"mpwatch: no automatic steps in this process: {type(exc).__name__}: {exc}\n")
    if _memory_wanted():
        try:
            if "mpwatch.worker.api" not in sys.modules:  # this hook, not the script, brings mpwatch in
                os.environ["MPWATCH_HOOK_ONLY"] = "1"  # protocol.ENV_HOOK_ONLY: read (and removed) by api
            try:
                from mpwatch.worker import api, cuda_memory
            finally:
                os.environ.pop("MPWATCH_HOOK_ONLY", None)

            cuda_memory.arm(torch, api._channel)
        except Exception as exc:  # noqa: BLE001 - never fail the script's import of torch
            sys.stderr.write(f"mpwatch: no CUDA memory forensics in this process: {type(exc).__name__}: "
                             f"{exc}\n")


def _watch_torch() -> None:
    if (_auto_wanted() or _memory_wanted()) and "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchFinder())


def boot_forked() -> None:
    """What this hook does at a worker's start, for a worker the run's forkserver forked
    (worker.boot.forkserver: it gave the child its parent-death signal and its environment
    first): the stack dumps, and the hooks after torch's import, at once where torch was preloaded."""
    _arm_dumps()
    torch = sys.modules.get("torch")
    if torch is not None:
        _after_torch(torch)
    else:
        _watch_torch()


OWN_NAME = "_mpwatch_sitecustomize"  # where this module stays loaded once the user's takes its name


def _chain() -> None:
    """Run the user's own sitecustomize further down sys.path as Python would have without
    mpwatch: it becomes `sitecustomize` (its attributes are there), and an error of its own
    goes on up, for `site` to say "Error in sitecustomize; ..." as it always does. This module
    stays loaded under OWN_NAME (its stack file and its torch finder live on); it keeps the
    name `sitecustomize` only where the user has none."""
    here = os.path.dirname(os.path.abspath(__file__))
    mine = sys.modules.pop("sitecustomize", None)
    if mine is not None:
        sys.modules[OWN_NAME] = mine
    saved = sys.path[:]
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        import importlib

        try:
            importlib.import_module("sitecustomize")  # the import system keeps it as `sitecustomize`
        except ImportError as exc:
            if exc.name != "sitecustomize":
                raise  # the user's module failed to import something: theirs to see, as without mpwatch
            if mine is not None:
                sys.modules["sitecustomize"] = mine  # the user has none: this one keeps the name
    finally:
        sys.path[:] = saved


_mpwatch_boot()
_watch_torch()
_chain()
