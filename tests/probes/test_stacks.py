"""Stack capture on real processes (the start-up hook's faulthandler, SIGUSR1), and
reading dumps back. A dump must never kill or change the process it reads."""
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mpwatch.probes import pyspy, stacks
from mpwatch.supervisor import spawn
from mpwatch.text.stackfmt import summarize
from tests.helpers import FIXTURES, alive, wait_for

DUMP = """\
=== mpwatch stack dump: pid 41 at 10:00:00 (stall)
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/work/proj/mpwatch/worker.py", line 100 in _run

Current thread 0x00007f0000000002 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3913 in all_reduce
  File "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
  File "/home/me/train.py", line 68 in train_step
  File "/home/me/train.py", line 90 in <module>
=== mpwatch stack dump: pid 42 at 10:00:00 (stall)
Thread 0x00007f0000000003 (most recent call first):
  File "/home/me/data.py", line 12 in read_shard
  File "/usr/lib/python3.11/multiprocessing/process.py", line 108 in run
"""


def test_parse_and_summarize_a_dump():
    procs = stacks.parse(DUMP)
    assert [p["pid"] for p in procs] == [41, 42]
    assert len(procs[0]["threads"]) == 2
    main = stacks.main_thread(procs[0])
    assert main["current"] and main["frames"][0][2] == "all_reduce"
    s = stacks.summarize(DUMP, 41)
    assert s == {"where": "train_step (train.py:68)", "innermost": "all_reduce (distributed_c10d.py:3913)",
                 "collective": "all_reduce", "threads": 2}
    # No "Current thread" marker: the oldest thread (listed last) is the main one.
    s = stacks.summarize(DUMP, 42)
    assert s["where"] == "read_shard (data.py:12)" and s["collective"] is None
    assert stacks.summarize(DUMP, 99) == {}


def test_user_code_is_told_from_libraries():
    assert stacks.is_user_file("/home/me/train.py")
    assert not stacks.is_user_file("/venv/lib/python3.11/site-packages/torch/nn/module.py")
    assert not stacks.is_user_file(stacks.__file__)  # mpwatch itself
    assert not stacks.is_user_file(os.__file__)
    assert not stacks.is_user_file("<frozen importlib._bootstrap>")


NAPPING = ("import signal, time\n"
           "signal.signal(signal.SIGUSR2, lambda *a: open(READY + '.usr2', 'w').close())\n"
           "def napping():\n    open(READY, 'w').close()\n    time.sleep(600)\nnapping()\n")


def _ready(tmp_path, code: str) -> str:
    # The child creates tmp_path/ready right before it blocks.
    return f"READY = {str(tmp_path / 'ready')!r}\n" + code


def _spawn(tmp_path, code_or_script, *args):
    """A Python process armed like a worker (the start-up hook, the stack file)."""
    stack_file = tmp_path / "faulthandler.out"
    env = dict(os.environ, MPWATCH_STACK_FILE=str(stack_file),
               PYTHONPATH=os.pathsep.join([spawn.INJECT_DIR, os.environ.get("PYTHONPATH", "")]))
    env.pop("MPWATCH_SUPERVISOR_PID", None)
    argv = [sys.executable, str(code_or_script), *map(str, args)] if str(code_or_script).endswith(".py") \
        else [sys.executable, "-c", code_or_script, *map(str, args)]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return p, stack_file


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def test_unmodified_script_is_dumped_and_keeps_running(tmp_path, procs):
    count = tmp_path / "count"
    p, stack_file = _spawn(tmp_path, FIXTURES / "hang_plain.py", count)
    procs.append(p)
    wait_for(lambda: stacks.handles_sigusr1(p.pid) and count.exists(), 60, what="the script to start")
    path, notes = stacks.capture([p.pid], stack_file, tmp_path / "dump.txt", label="(test)")
    text = path.read_text()
    assert notes == []
    assert f"=== mpwatch stack dump: pid {p.pid}" in text
    assert "in count_forever" in text
    assert stacks.summarize(text, p.pid)["where"].startswith("count_forever (hang_plain.py:")
    before = int(count.read_text())
    wait_for(lambda: count.exists() and int(count.read_text()) > before + 10, 60,
             what="the script to keep counting after the dump")
    assert p.poll() is None


def test_blocked_in_c_lock_is_dumped(tmp_path, procs):
    code = ("import threading\ndef held_forever():\n    l = threading.Lock(); l.acquire()\n"
            "    open(READY, 'w').close()\n    l.acquire()\nheld_forever()\n")
    p, stack_file = _spawn(tmp_path, _ready(tmp_path, code))
    procs.append(p)
    wait_for(lambda: (tmp_path / "ready").exists(), 60, what="the lock to be taken")
    wait_for(lambda: stacks._proc_status(p.pid)[0] == "S", 10, what="the main thread to block")
    path, notes = stacks.capture([p.pid], stack_file, tmp_path / "dump.txt")
    assert notes == []
    assert stacks.summarize(path.read_text(), p.pid)["innermost"].startswith("held_forever (")
    assert p.poll() is None


# A Python process with no SIGUSR1 handler (its default action kills) that shows, by a
# file, that it handled a SIGUSR2 sent after the capture: had the capture sent SIGUSR1,
# that lower, earlier signal would have been delivered (and killed it) first.
NO_HANDLER = ("import signal, time\nsignal.signal(signal.SIGUSR2, lambda *a: open(READY + '.usr2', 'w').close())\n"
              "open(READY, 'w').close()\nwhile True:\n    time.sleep(1)\n")


def test_process_without_handler_is_not_signalled(tmp_path, procs):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MPWATCH_")}  # no start-up hook
    p = subprocess.Popen([sys.executable, "-c", _ready(tmp_path, NO_HANDLER)], env=env)
    procs.append(p)
    wait_for(lambda: (tmp_path / "ready").exists(), 60, what="the process to start")
    assert not stacks.handles_sigusr1(p.pid)
    path, notes = stacks.capture([p.pid], tmp_path / "fh.out", tmp_path / "dump.txt")
    assert any("no stack handler" in n for n in notes)
    assert "not signalled" in path.read_text()
    os.kill(p.pid, signal.SIGUSR2)
    wait_for(lambda: (tmp_path / "ready.usr2").exists() or p.poll() is not None, 60,
             what="the process to handle the later SIGUSR2 (or to die of an earlier SIGUSR1)")
    assert p.poll() is None and alive(p.pid), f"the process died: {p.returncode}"


def test_stopped_process_is_read_from_outside_never_signalled(tmp_path, procs):
    p, stack_file = _spawn(tmp_path, _ready(tmp_path, NAPPING))
    procs.append(p)
    wait_for(lambda: (tmp_path / "ready").exists(), 60, what="the nap to start")
    os.kill(p.pid, signal.SIGSTOP)
    wait_for(lambda: stacks._proc_status(p.pid)[0] == "T", 10, what="the stop")
    path, notes = stacks.capture([p.pid], stack_file, tmp_path / "dump.txt")
    text = path.read_text()
    if pyspy.find():
        assert "(stopped; py-spy --nonblocking)" in text and "napping" in text
    else:
        assert any("stopped, not signalled" in n for n in notes)
    size = stack_file.stat().st_size if stack_file.exists() else 0
    # Had it been sent SIGUSR1 while stopped, it would dump on SIGCONT, unasked. A SIGUSR2
    # sent after SIGCONT is delivered after any such pending SIGUSR1 (lower signals first;
    # faulthandler writes inside its C handler): once the SIGUSR2 is handled, a dump owed
    # would be in the file.
    os.kill(p.pid, signal.SIGCONT)
    os.kill(p.pid, signal.SIGUSR2)
    wait_for(lambda: (tmp_path / "ready.usr2").exists(), 60, what="the process to handle SIGUSR2 after SIGCONT")
    assert (stack_file.stat().st_size if stack_file.exists() else 0) == size
    assert p.poll() is None


def ptrace_permitted(pid: int) -> bool:
    """Whether this user may ptrace-attach to pid, asked of the kernel by a short-lived
    process (PTRACE_SEIZE does not stop the tracee; the tracer's exit detaches it)."""
    code = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); "
            "sys.exit(0 if libc.ptrace(0x4206, int(sys.argv[1]), None, None) == 0 else 1)")
    return subprocess.run([sys.executable, "-c", code, str(pid)], timeout=30).returncode == 0


def test_native_frames_when_pyspy_is_permitted(tmp_path, procs):
    if not pyspy.find():
        pytest.skip("py-spy is not installed")
    p, stack_file = _spawn(tmp_path, _ready(tmp_path, NAPPING))
    procs.append(p)
    wait_for(lambda: (tmp_path / "ready").exists(), 60, what="the nap to start")
    path, notes = stacks.capture([p.pid], stack_file, tmp_path / "dump.txt", native=True)
    text = path.read_text()
    assert "napping" in text
    ok_native = f"--- py-spy --native: pid {p.pid} ---" in text
    # Native frames wherever ptrace is permitted (asked independently); where it is not
    # (some containers), the one line that says so, not just any py-spy failure.
    if ptrace_permitted(p.pid):
        assert ok_native, (notes, text[-2000:])
    else:
        assert not ok_native and any(n.startswith(f"pid {p.pid}: py-spy: ptrace not permitted") for n in notes), notes
    assert p.poll() is None


def test_a_dump_cut_short_is_told_from_a_whole_one():
    whole = DUMP.split("=== mpwatch stack dump: pid 42")[0]
    assert stacks._looks_whole(whole)
    assert not stacks._looks_whole(whole.rsplit("  File", 1)[0])  # the main thread's <module> is missing
    assert stacks._looks_whole('Current thread 0x1 (most recent call first):\n  File "<frozen runpy>", '
                               'line 198 in _run_module_as_main\n')


def test_the_native_stack_names_ddps_all_reduce_inside_backward():
    # A real stall dump (demo/hang.py, rank 1 paused): the Python stack ends in backward(),
    # which hides the collective; py-spy's native frames show DDP's reducer waiting in it.
    from mpwatch.text.stackfmt import native_collective

    text = (Path(__file__).parent / "data" / "ddp_backward_stall.txt").read_text()
    pid = int(text.split("pid ", 1)[1].split()[0])
    assert summarize(text, pid)["collective"] is None
    assert native_collective(text, pid) == "DDP's gradient all-reduce (backward)"
    assert native_collective(text, pid + 1) is None  # another process's stack says nothing of it
