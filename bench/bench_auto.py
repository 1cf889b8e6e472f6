"""What automatic steps cost (issue 21), side by side in one run, each figure measured inside
a real worker of `mpwatch --headless -n 1`, with the hooks (the default) and, where there is
an A/B, without them (`--no-auto`), in alternated runs:

- `import torch`: its time in the worker with and without, and of it the hook's own part
  (mpwatch.worker.auto's install, timed around the start-up hook's call: importing mpwatch's worker
  side and putting the hooks in), which the A/B of two whole imports cannot resolve on a
  noisy machine; compiled modules as an install has them (bytecode in a scratch folder);
- the hooks' cost per optimizer step in µs: the wrappers alone (around no-ops), called as a
  step calls them, CPU time of the whole worker process (the sender's reading of the loss
  included); and as a share of the mnist demo's step (its model and batch, CPU time a step);
- training throughput with and without: the mnist demo's model and batch in a loop with no line
  of mpwatch's (a DataLoader, a loss, backward(), an SGD step: everything the hooks listen to),
  its samples/s from its 3rd step on, by the wall clock and per CPU second.
"""
from __future__ import annotations

import json
import statistics

from bench import measure
from bench.bench_training import run_plain
from bench.harness import ROOT, row

MARK = "MPWATCH_BENCH_AUTO "
BEFORE_ISSUE_32 = "7eb6a79f6af9a4e77f98af73a146745aad443901"  # main before the phase times (data and compute only)
IMPORT_TARGET_MS = 5.0  # "import torch slowed by at most a few ms"
SHARE_TARGET = 0.01  # the hooks under 1% of the mnist demo's step

IMPORT_TIMER = r'''
import json, os, sys, time
import sitecustomize  # mpwatch's start-up hook: its _auto runs mpwatch.worker.auto's install after torch's import
spent = [0.0, 0.0]
real = getattr(sitecustomize, "_auto", None)
if real is not None:
    def timed(module):
        t, c = time.perf_counter(), time.thread_time()
        real(module)
        spent[0] += time.perf_counter() - t
        spent[1] += time.thread_time() - c
    sitecustomize._auto = timed
t0, c0 = time.perf_counter(), time.thread_time()
import torch
took, cpu = time.perf_counter() - t0, time.thread_time() - c0
hooked = hasattr(torch.autograd.backward, "__wrapped__")
print(os.environ["MARK"] + json.dumps({"import_s": took, "import_cpu_s": cpu, "hook_s": spent[0],
                                       "hook_cpu_s": spent[1], "hooked": hooked}), flush=True)
'''

# The hooks alone: in a worker under mpwatch, the wrappers mpwatch.worker.auto puts into torch, built
# around no-ops (no kernel, no autograd: only what the hooks add runs), called as one training
# step calls them: a DataLoader batch, backward() of a scalar loss, an optimizer step (the step
# goes into the worker's buffer, and the sender reads its loss). CPU time of the whole process.
MICRO = r'''
import json, os, sys, time
import torch
from mpwatch.worker import api as worker
from mpwatch.worker.auto import patches
from mpwatch.worker.auto.loss import Capture, StepLoss
from mpwatch.worker.auto.steps import Steps
n, reps = int(sys.argv[1]), int(sys.argv[2])
import inspect
capture = Capture(torch)
if len(inspect.signature(worker.auto_step).parameters) == 4:  # before issue 32: data and compute seconds
    def emit(step, parts, data_s, compute_s):
        worker.auto_step(step, StepLoss(parts, capture.ring) if parts else None, data_s, compute_s)
else:  # each phase's seconds (worker.auto.split), as worker.auto's own emit passes them
    def emit(step, parts, times, pairs):
        worker.auto_step(step, StepLoss(parts, capture.ring) if parts else None, times)
steps = Steps(emit)
steps.has_optimizer = True
backward = patches._backward(lambda *a, **k: None, steps, capture, worker.auto_wanted)
# an optimizer class's step() as mpwatch wraps it, around what torch's own wrapper does for us: its hook
if hasattr(patches, "_optimizer_step"):
    step = patches._optimizer_step(lambda opt: steps.optimizer_stepped(), steps, capture, worker.auto_wanted)
else:  # before issue 31's step() wrapper: torch's post hook alone counted the step
    def step(opt):
        steps.optimizer_stepped()
class Batches:
    def __next__(self):
        return None
patches._data_loader(Batches, steps)
batches, loss = Batches(), torch.tensor(0.5, requires_grad=True) * 2
cpu = time.process_time_ns

def hooks(k):
    c = cpu()
    for _ in range(k):
        next(batches)
        backward(loss)
        step(None)
    time.sleep(0.6)  # the sender's flushes of these steps (reading their losses) count too
    return (cpu() - c) / k / 1000.0

def empty(k):
    c = cpu()
    for _ in range(k):
        pass
    time.sleep(0.6)
    return (cpu() - c) / k / 1000.0

hooks(1000)
got = sorted(hooks(n) - empty(n) for _ in range(reps))
print(os.environ["MARK"] + json.dumps({"us": got[len(got) // 2], "all": got}), flush=True)
'''

TRAIN = r'''
import sys, time
import torch
import torch.nn.functional as F
sys.path.insert(0, sys.argv[1])  # demo/: the mnist demo's model and data
import mnist_data
from mnist import Net
steps = int(sys.argv[3])
torch.set_num_threads(1)
torch.manual_seed(0)
data = mnist_data.load(sys.argv[2], download_ok=False)
x_all = mnist_data.normalise(data.train.images[:steps * 64])
ds = torch.utils.data.TensorDataset(x_all, data.train.labels[:steps * 64])
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
t0 = c0 = None
for i, (x, y) in enumerate(torch.utils.data.DataLoader(ds, batch_size=64)):
    if i == 2:
        t0, c0 = time.perf_counter(), time.process_time()
    loss = F.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
n = (steps - 2) * 64
print(f"cpu samples/s: {n / (time.process_time() - c0):.1f}", flush=True)
print(f"samples/s: {n / (time.perf_counter() - t0):.1f}", flush=True)
'''


def _parse(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise RuntimeError(f"the timing script printed no result: {text[-300:]!r}")


def _env(d) -> dict:
    """As installed: Python reads (and on the first run writes) compiled modules, here in the
    scratch folder (this checkout may run with PYTHONDONTWRITEBYTECODE, which would make every
    import of mpwatch's worker side a compilation)."""
    env = measure.clean_env(MARK=MARK, PYTHONPYCACHEPREFIX=d / "pycache")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _under(d, script, args, auto: bool, name: str, tree=None) -> str:
    """rank 0's stdout of `mpwatch --headless -n 1 [--no-auto] script args` (under the mpwatch
    of `tree`, measure.tree_at's folder, when given). The worker imports torch itself
    (--no-preload: no forkserver imports it first), which is what the import rows time."""
    opts = (() if auto else ("--no-auto",)) + (("--no-preload",) if tree is None else ())
    env = _env(d) if tree is None else dict(_env(d), PYTHONPATH=str(tree))
    with measure.Headless(d, script, *args, n=1, opts=opts, name=name, env=env) as h:
        rc = h.wait(timeout=600)
        text = (h.run_dir / "rank-0" / "stdout.log").read_text(errors="replace")
        if rc != 0:
            raise RuntimeError(f"mpwatch exited {rc}: {h.stderr_tail()}")
    return text


def _sides(d, script, args, rounds: int, tag: str, parse, sides=("auto", "off"), tree=None) -> dict[str, list]:
    """Alternated runs of each side: auto (the hooks), off (--no-auto), before (the hooks of the
    mpwatch in `tree`)."""
    _under(d, script, args, True, f"{tag}-warm-up")  # compiles mpwatch's modules once, outside the measurement
    if "before" in sides:
        _under(d, script, args, True, f"{tag}-warm-up-before", tree)
    out: dict[str, list] = {side: [] for side in sides}
    for i, side in measure.alternated(rounds, list(sides)):
        got = parse(_under(d, script, args, side != "off", f"{tag}-{side}-{i}", tree if side == "before" else None))
        out[side].append(got)
    return out


def _spread(xs: list[float], fmt: str) -> str:
    xs = sorted(xs)
    return f"{xs[0]:{fmt}}-{xs[-1]:{fmt}}"


def import_rows(d, rounds: int) -> list[dict]:
    script = measure.write_script(d, "import_timer.py", IMPORT_TIMER)
    runs = _sides(d, script, (), rounds, "import", _parse)
    if not all(r["hooked"] for r in runs["auto"]) or any(r["hooked"] for r in runs["off"]):
        raise RuntimeError("a run with the hooks had none, or one without had them")
    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "--no-preload", "-n", "1", "import_timer.py"])
    med = statistics.median
    on, off = [1000 * r["import_s"] for r in runs["auto"]], [1000 * r["import_s"] for r in runs["off"]]
    on_cpu, off_cpu = [1000 * r["import_cpu_s"] for r in runs["auto"]], [1000 * r["import_cpu_s"] for r in runs["off"]]
    hook, hook_cpu = [1000 * r["hook_s"] for r in runs["auto"]], [1000 * r["hook_cpu_s"] for r in runs["auto"]]
    return [
        row("import torch in a worker, with the automatic-steps hook, wall clock", cmd, round(med(on), 1),
            round(med(off), 1), alt_name="--no-auto", unit="ms",
            note=f"`import torch` in the worker, median of {rounds} alternated runs each; with {_spread(on, '.0f')} "
                 f"ms, without {_spread(off, '.0f')} ms; CPU time of the importing thread {med(on_cpu):.0f} ms "
                 f"with, {med(off_cpu):.0f} ms without: torch's own import varies by far more than the hook costs "
                 "(next row)"),
        row("import torch: the hook's own part (mpwatch.worker.auto's install), CPU", cmd, round(med(hook_cpu), 2),
            unit="ms", target=f"≤ {IMPORT_TARGET_MS:g} ms", ok=med(hook_cpu) <= IMPORT_TARGET_MS,
            note=f"timed in the worker around the start-up hook's call right after torch's own import (importing "
                 f"mpwatch's worker side and mpwatch.worker.auto, putting the hooks in): CPU {_spread(hook_cpu, '.2f')} ms, "
                 f"wall clock median {med(hook):.2f} ms ({_spread(hook, '.2f')}) over {rounds} runs; compiled modules "
                 "as installed; until torch's import the finder costs one comparison per import; a process that "
                 "never imports torch loads nothing of mpwatch"),
    ]


def step_rows(d, rounds: int, n: int, reps: int, step_cpu_us: float) -> list[dict]:
    script = measure.write_script(d, "hooks_timer.py", MICRO)
    with measure.tree_at(BEFORE_ISSUE_32) as tree:
        sides = ("auto",) if isinstance(tree, str) else ("auto", "before")
        runs = _sides(d, script, (n, reps), rounds, "hooks", _parse, sides=sides,
                      tree=None if isinstance(tree, str) else tree)
    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "--no-preload", "-n", "1", "hooks_timer.py", str(n), str(reps)])
    costs = [r["us"] for r in runs["auto"]]
    before = [r["us"] for r in runs.get("before", [])]
    cost = statistics.median(costs)
    share = cost / step_cpu_us
    return [
        row("Automatic steps: the hooks' cost per optimizer step, CPU (phase times included)", cmd, round(cost, 2),
            round(statistics.median(before), 2) if before else None,
            alt_name=f"before issue 32 ({BEFORE_ISSUE_32[:7]}): data and compute only", unit="µs",
            note=f"the wrappers mpwatch.worker.auto puts into torch, around no-ops, called as a step calls them (a "
                 f"DataLoader batch, backward() of a scalar loss, an optimizer step), in a worker under mpwatch: "
                 f"CPU time of the whole process (the buffer, each phase's boundaries and times, and the sender "
                 f"reading the loss and shipping the step), minus an empty loop; median of {rounds} alternated runs "
                 f"x {reps} loops of {n} steps ({_spread(costs, '.2f')} µs"
                 + (f"; before {_spread(before, '.2f')} µs)" if before else ")")),
        row("Automatic steps: the hooks' cost as a share of the mnist demo's step", cmd, round(100 * share, 3),
            unit="%", target=f"< {100 * SHARE_TARGET:g}%", ok=share < SHARE_TARGET,
            note=f"{cost:.2f} µs of {step_cpu_us / 1000:.2f} ms, the CPU time of a step of the mnist demo's model "
                 "and batch (64) in the throughput runs below, without the hooks"),
    ]


def throughput_rows(d, rounds: int, steps: int) -> list[dict]:
    script = measure.write_script(d, "mnist_loop.py", TRAIN)
    args = (ROOT / "demo", d / "data", steps)

    def rates(text: str) -> dict:
        return {"wall": float(text.rsplit("\nsamples/s: ", 1)[1].split()[0]),
                "cpu": float(text.rsplit("cpu samples/s: ", 1)[1].split()[0])}

    runs = _sides(d, script, args, rounds, "train", rates)
    cmd = measure.shown([*measure.mpwatch_cmd(), "--headless", "--no-preload", "-n", "1", "mnist_loop.py"])
    out = []
    for key, what, target in (("wall", "Training throughput with and without automatic steps, wall clock", None),
                              ("cpu", "Training throughput per CPU second with and without automatic steps", 0.99)):
        on, off = [r[key] for r in runs["auto"]], [r[key] for r in runs["off"]]
        ratios = [a / b for a, b in zip(on, off, strict=True)]
        ratio = statistics.median(ratios)
        out.append(row(what + " (the mnist demo's model, an unmodified loop)", cmd, round(statistics.median(on), 1),
                       round(statistics.median(off), 1), alt_name="--no-auto", unit="samples/s", ratio=ratio,
                       target=None if target is None else f"≥ {target:g}x",
                       ok=None if target is None else ratio >= target,
                       note=f"median of {rounds} alternated pairs' ratios ({_spread(ratios, '.3f')}); with "
                            f"{_spread(on, '.0f')}, without {_spread(off, '.0f')}; a DataLoader of the stand-in "
                            f"MNIST, demo/mnist.py's Net, cross-entropy, SGD, batch 64, one thread, {steps} steps "
                            "from the 3rd on" + ("; per CPU second of the worker process (the sender included): "
                                                 "what a busy neighbour hardly moves" if key == "cpu" else
                                                 "; on this shared 2-core machine the wall clock varies by tens "
                                                 "of percents from run to run")))
    return out


def run(quick: bool = False) -> list[dict]:
    rounds, n, reps, steps = (2, 5000, 3, 60) if quick else (7, 50000, 7, 300)
    with measure.scratch("auto") as d:
        run_plain(d, 3, "warm-up")  # builds the stand-in data once, outside the measurement
        rows = import_rows(d, rounds)
        train = throughput_rows(d, rounds, steps)
        step_cpu_us = 64 / train[1]["alternative"] * 1e6  # samples per CPU second without the hooks
        rows += step_rows(d, max(1, rounds // 2), n, reps, step_cpu_us)
        rows += train
    return rows
