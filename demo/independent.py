"""Independent training: every trainer has its own model and its own shard; no collectives.

The plainest multi-process pattern, and the one where `mpwatch --resize-mode independent`
makes sense: adding or removing a rank disturbs no other. Each mpwatch rank (RANK of
WORLD_SIZE; a plain run is rank 0 of 1) starts --procs trainer processes with
torch.multiprocessing; trainer p of rank r takes shard r * procs + p of WORLD_SIZE * procs.
The trainers of a rank share a step counter (an `mp.Value`) and their latest losses (an
`mp.Array`), and send their results back to the parent through a `Queue`; the parent
reports the rank's total steps and mean loss, and prints a table of the results. A trainer's
steps and loss are its optimizer steps and the losses it passes to backward() (mpwatch's
automatic steps); what it adds itself is a metric, its samples/s (`mpwatch.report()` of
metrics only merges them into the automatic steps).

The last line is machine-readable: samples/s: N
"""
from __future__ import annotations

import argparse
import os
import queue
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
    p = argparse.ArgumentParser(description="Independent models on independent shards, one per process.")
    p.add_argument("--procs", type=int, default=2, help="trainer processes per rank (default 2)")
    p.add_argument("--max-steps", type=int, default=200, help="steps per trainer (default 200)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--data-dir", default="data")
    p.add_argument("--no-download", action="store_true")
    args = p.parse_args(argv)
    if args.procs < 1 or args.max_steps < 1 or args.batch_size < 1 or args.lr <= 0:
        p.error("--procs, --max-steps and --batch-size must be at least 1, --lr positive")
    return args


def train(p: int, shard: int, shards: int, args, data, counter, last_loss, results):
    torch.set_num_threads(1)
    torch.manual_seed(shard)
    images, labels = data.train.images[shard::shards], data.train.labels[shard::shards]
    model = Net()  # this process's own model: nothing is shared but the counter
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    t0 = time.perf_counter()
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
        value = loss.item()
        last_loss[p] = value
        with counter.get_lock():
            counter.value += 1
        mpwatch.report(samples_per_s=round(step * args.batch_size / (time.perf_counter() - t0), 1))
    test_loss, acc = evaluate(model, mnist_data.normalise(data.test.images[:500]), data.test.labels[:500],
                              torch.device("cpu"))
    results.put({"shard": shard, "pid": os.getpid(), "steps": args.max_steps, "train_loss": value,
                 "test_loss": test_loss, "accuracy": acc, "seconds": time.perf_counter() - t0})


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    data = mnist_data.load(args.data_dir, download_ok=not args.no_download)
    shards = world * args.procs
    ctx = mp.get_context("fork" if sys.platform == "linux" else "spawn")
    counter = ctx.Value("l", 0)  # every trainer of this rank adds its steps here
    last_loss = ctx.Array("d", [float("nan")] * args.procs)
    results = ctx.Queue()
    print(f"rank {rank} of {world}: {args.procs} trainers on shards "
          f"{rank * args.procs}..{rank * args.procs + args.procs - 1} of {shards} ({data.source})", flush=True)

    t0 = time.perf_counter()
    procs = [ctx.Process(target=train, name=f"trainer-{p}",
                         args=(p, rank * args.procs + p, shards, args, data, counter, last_loss, results))
             for p in range(args.procs)]
    for p in procs:
        p.start()
    got = []

    def collect(timeout):
        try:
            got.append(results.get(timeout=timeout))
        except queue.Empty:
            pass

    # Drain the queue while waiting: a child with unread queue data cannot exit.
    while len(got) < len(procs) and any(p.is_alive() for p in procs):
        collect(0.25)
        losses = [v for v in last_loss[:] if v == v]
        if losses:
            mpwatch.report(step=counter.value, loss=sum(losses) / len(losses), trainers=len(losses))
    while len(got) < len(procs):  # results may still be in flight from trainers that just ended
        before = len(got)
        collect(1.0)
        if len(got) == before:
            break
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - t0
    for r in sorted(got, key=lambda r: r["shard"]):
        print(f"  shard {r['shard']:>3} pid {r['pid']:>7}: {r['steps']} steps in {r['seconds']:.1f}s, "
              f"train loss {r['train_loss']:.4f}, test loss {r['test_loss']:.4f}, accuracy {r['accuracy']:.1%}",
              flush=True)
    failed = [(p.name, p.exitcode) for p in procs if p.exitcode != 0]
    if failed or len(got) != len(procs):
        print(f"rank {rank}: {len(got)} of {len(procs)} trainers sent results"
              + (f"; failed: {', '.join(f'{n} (exit {c})' for n, c in failed)}" if failed else ""), flush=True)
        return 1
    mean = sum(r["test_loss"] for r in got) / len(got)
    mpwatch.report(step=counter.value, loss=mean, trainers=len(got))
    print(f"rank {rank}: {counter.value} steps in all, mean test loss {mean:.4f}", flush=True)
    print(f"samples/s: {counter.value * args.batch_size / elapsed:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
