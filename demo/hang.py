"""A small DDP job (gloo, CPU) that can hang on purpose: the demo for mpwatch's hang
diagnosis.

Each step: forward, backward (DDP all-reduces the gradients), optimizer step, report the
local loss, then all_reduce the loss so every rank knows the global mean. With
--hang-rank R --hang-step S, rank R stops at step S after its backward but before its
report and that all_reduce: its peers report step S and block in the all_reduce, waiting
for it forever. mpwatch should say "rank R is at step S-1; the others wait in
all_reduce at step S", with each rank's stack.

    mpwatch -n 3 --stall-timeout 5 demo/hang.py --hang-rank 1 --hang-step 20
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import mpwatch


def hang_here():
    """Where the culprit stops: a stand-in for a stuck data loader or a lost message."""
    while True:
        time.sleep(3600)


def batch(step: int, rank: int, n: int = 32):
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(n, 16, generator=g)
    y = (x.sum(dim=1, keepdim=True) > 0).float()
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--hang-rank", type=int, default=-1, help="the rank that stops (default: none)")
    ap.add_argument("--hang-step", type=int, default=20, help="the step at which it stops")
    ap.add_argument("--step-time", type=float, default=0.05, help="extra seconds per step")
    args = ap.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.BCEWithLogitsLoss()
    print(f"rank {rank}/{world} pid {os.getpid()}: hang rank {args.hang_rank} at step {args.hang_step}",
          flush=True)
    for step in range(args.steps):
        with mpwatch.phase("compute"):
            x, y = batch(step, rank)
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(args.step_time)
        if rank == args.hang_rank and step == args.hang_step:
            print(f"rank {rank}: stopping before the all_reduce of step {step}", flush=True)
            hang_here()
        mpwatch.report(step=step, loss=loss)
        with mpwatch.phase("sync"):
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            mean /= world
        if rank == 0 and step % 20 == 0:
            print(f"step {step}: mean loss {mean.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
