"""GPU contention on purpose: every rank pinned to the same GPU, each growing its memory.

The classic mistake is `torch.cuda.set_device(0)` (or no set_device at all) where the rank's
LOCAL_RANK was meant: N ranks then share one GPU, compete for its memory and compute, and
the other GPUs idle. Run `mpwatch -n 2 demo/contention.py`: the GPU panel shows two worker
pids on GPU 0, their memory climbing, which is what mpwatch's contention check must spot.

Each rank allocates --chunk-mb more every step, up to --max-gb, and keeps the GPU busy with
matrix products in between; it stops early, and says so, if the GPU runs out of memory.
On a machine without a CUDA GPU there is nothing to show: it says so and exits 0.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import mpwatch


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Two ranks on one GPU by mistake, growing their memory.")
    p.add_argument("--steps", type=int, default=40, help="steps (default 40)")
    p.add_argument("--chunk-mb", type=int, default=256, help="memory added per step, MiB (default 256)")
    p.add_argument("--max-gb", type=float, default=8.0, help="stop growing at this much per rank (default 8)")
    p.add_argument("--interval", type=float, default=0.25, help="seconds of matrix products per step")
    args = p.parse_args(argv)
    if args.steps < 1 or args.chunk_mb < 1 or args.max_gb <= 0 or args.interval < 0:
        p.error("--steps and --chunk-mb must be at least 1, --max-gb positive, --interval not negative")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    if not torch.cuda.is_available():
        print(f"contention: rank {rank}: no CUDA GPU here, nothing to show "
              "(this demo pins every rank to GPU 0 and grows its memory)", flush=True)
        return 0
    torch.cuda.set_device(0)  # THE MISTAKE: should be int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", 0)
    print(f"contention: rank {rank} (LOCAL_RANK {os.environ.get('LOCAL_RANK', '0')}) on GPU 0, "
          f"{torch.cuda.get_device_name(0)}", flush=True)
    held = []
    chunk = args.chunk_mb << 20
    limit = int(args.max_gb * (1 << 30))
    a = torch.randn(2048, 2048, device=dev)
    oom_at = None
    for step in range(1, args.steps + 1):
        with mpwatch.phase("alloc"):
            if oom_at is None and sum(t.numel() for t in held) + chunk <= limit:
                try:
                    held.append(torch.ones(chunk, dtype=torch.uint8, device=dev))
                except torch.cuda.OutOfMemoryError:
                    oom_at = torch.cuda.memory_allocated(dev)
                    print(f"contention: rank {rank}: out of GPU memory at {oom_at / 2**30:.2f} GiB "
                          "held by this rank: the ranks are crowding one GPU", flush=True)
        with mpwatch.phase("compute"):
            t_end = time.perf_counter() + args.interval
            while time.perf_counter() < t_end:
                a @ a
                torch.cuda.synchronize(dev)
        # No loss: nothing is learned here. The memory held is the number to watch.
        mpwatch.report(step=step, held_mb=sum(t.numel() for t in held) >> 20)
    gib = torch.cuda.max_memory_allocated(dev) / 2**30
    print(f"contention: rank {rank}: {args.steps} steps, peak {gib:.2f} GiB on GPU 0", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
