"""Hogwild!: several processes train ONE model in shared memory, without locks.

The classic torch.multiprocessing pattern: the parent builds the model, calls
`model.share_memory()`, and starts --procs trainer processes itself; each runs its own SGD
on the shared parameters. Under mpwatch (`mpwatch -n 1 demo/hogwild.py`) the trainers are
children of rank 0: each one's optimizer steps are its steps, and the losses it passes to
backward() its loss, sent over its own channel with no report() in the trainers (mpwatch's
automatic steps; `mpwatch.phase()` still splits their time); the parent, which trains
nothing, reports the shared model's test loss as the trainers improve it.

The trainers are forked on Linux (no second torch import: quick start) and spawned
elsewhere, where fork is unsafe. The last line is machine-readable: samples/s: N
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mnist_data  # noqa: E402
from mnist import Net, evaluate  # noqa: E402

import mpwatch  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Hogwild! training of one shared model by several processes.")
    p.add_argument("--procs", type=int, default=2, help="trainer processes (default 2)")
    p.add_argument("--max-steps", type=int, default=300, help="steps per trainer (default 300)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--data-dir", default="data")
    p.add_argument("--no-download", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.procs < 1 or args.max_steps < 1 or args.batch_size < 1 or args.lr <= 0:
        p.error("--procs, --max-steps and --batch-size must be at least 1, --lr positive")
    return args


def train(i: int, args, model, images, labels, counter):
    """One trainer: lock-free SGD on the shared parameters (the Hogwild! bet: updates rarely collide)."""
    torch.set_num_threads(1)  # the trainers share the cores
    torch.manual_seed(args.seed + 1 + i)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    for step in range(1, args.max_steps + 1):
        with mpwatch.phase("data"):
            idx = torch.randint(0, len(labels), (args.batch_size,))
            x, y = mnist_data.normalise(images[idx]), labels[idx]
        with mpwatch.phase("compute"):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
        with mpwatch.phase("optimizer"):
            opt.step()
        with counter.get_lock():
            counter.value += 1
    print(f"trainer {i} (pid {os.getpid()}): {args.max_steps} steps, last loss {loss.item():.4f}", flush=True)


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    data = mnist_data.load(args.data_dir, download_ok=not args.no_download)
    images, labels = data.train.images, data.train.labels  # uint8, normalised per batch
    test_x, test_y = mnist_data.normalise(data.test.images[:2000]), data.test.labels[:2000]
    probe_x, probe_y = test_x[:500], test_y[:500]  # the parent's cheap, frequent look at the shared model

    torch.manual_seed(args.seed)
    model = Net()
    model.share_memory()  # parameters move to shared memory: every trainer updates the same tensors
    ctx = mp.get_context("fork" if sys.platform == "linux" else "spawn")
    counter = ctx.Value("l", 0)
    loss0, _ = evaluate(model, probe_x, probe_y, torch.device("cpu"))
    print(f"hogwild: {args.procs} trainers x {args.max_steps} steps on one shared model "
          f"({data.source}); test loss {loss0:.4f} before", flush=True)
    mpwatch.report(step=0, loss=loss0)

    t0 = time.perf_counter()
    procs = [ctx.Process(target=train, args=(i, args, model, images, labels, counter), name=f"trainer-{i}")
             for i in range(args.procs)]
    for p in procs:
        p.start()
    # The parent watches the shared model improve while the trainers work on it.
    while any(p.is_alive() for p in procs):
        with mpwatch.phase("eval"):
            loss, acc = evaluate(model, probe_x, probe_y, torch.device("cpu"))
        mpwatch.report(step=counter.value, loss=loss, accuracy=round(acc, 4))
        for p in procs:
            p.join(timeout=1.0 / len(procs))
    elapsed = time.perf_counter() - t0
    failed = [(p.name, p.exitcode) for p in procs if p.exitcode != 0]
    loss, acc = evaluate(model, test_x, test_y, torch.device("cpu"))
    mpwatch.report(step=counter.value, loss=loss, accuracy=round(acc, 4))
    if failed:
        print(f"hogwild: trainers failed: {', '.join(f'{n} (exit {c})' for n, c in failed)}", flush=True)
        return 1
    print(f"hogwild: {counter.value} steps in all; test loss {loss0:.4f} -> {loss:.4f}, accuracy {acc:.1%}",
          flush=True)
    print(f"samples/s: {counter.value * args.batch_size / elapsed:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
