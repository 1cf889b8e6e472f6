"""Data-parallel training of a small CNN on MNIST: the demo every mpwatch user runs first.

Runs the same three ways:
    python demo/mnist.py                     one process, no process group
    torchrun --nproc-per-node 2 demo/mnist.py
    mpwatch demo/mnist.py                    (-n N; the TUI shows every rank)

torchrun's environment contract (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT) picks the
process group: nccl with one GPU per rank (torch.cuda.set_device(LOCAL_RANK)), gloo on CPU.
A DistributedSampler shards each epoch; `mpwatch.report()` and `mpwatch.phase()` feed the
watcher, `mpwatch.tunable("lr", ...)` lets `t` (or `mpwatch ctl set lr 0.01`) change the
learning rate at one step on every rank, and `mpwatch.should_checkpoint()` takes `c`'s
"checkpoint now"; all are no-ops outside it.

The gradient all-reduce is explicit: the backward pass runs under DDP's `no_sync()`, then
one all-reduce of all gradients, flattened, is timed as the "sync" phase. (DDP's own
all-reduce overlaps the backward pass, so it could not be timed apart from "compute".) The
same all-reduce carries one more number: whether any rank was asked to stop. So every rank
stops after the same step, rank 0 writes the checkpoint, and nobody waits on a peer that
already left.

Checkpoints (rank 0; every --checkpoint-every steps, on SIGTERM/SIGINT, and at the end) hold
the model, the optimizer and the position in the epoch in samples. On start the latest one
is loaded, whatever WORLD_SIZE it was written with: a restart or a resize (mpwatch's restart
mode stops every rank and starts N) loses only the steps since the last checkpoint and goes
on with the new world size. The default checkpoint folder is per run (mpwatch's run id, or
torchrun's), so a new run starts afresh while a restarted one resumes.

Its last line is machine-readable for bench/bench_training.py:  samples/s: N
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # mnist_data beside this file
import mnist_data  # noqa: E402

import mpwatch  # noqa: E402

EXIT_PEER_STOPPED = 75  # EX_TEMPFAIL: stopped because another rank was stopped
EXIT_PEER_LOST = 76  # a collective failed: a peer died without a word


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="DDP training of a small CNN on MNIST (or a generated stand-in).")
    p.add_argument("--epochs", type=int, default=1, help="epochs to train (default 1)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="stop after this many optimizer steps in all (default: 200 on CPU, none on GPU; 0: none)")
    p.add_argument("--batch-size", type=int, default=64, help="samples per rank per step (default 64)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument("--data-dir", default="data", help="where MNIST is or goes (default ./data)")
    p.add_argument("--checkpoint-dir", default=None,
                   help="default ./checkpoints/mnist-<run id>; a run restarted by mpwatch resumes from it")
    p.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints (0: only at the end)")
    p.add_argument("--log-every", type=int, default=25, help="steps between progress lines on rank 0")
    p.add_argument("--no-download", action="store_true", help="never try to download MNIST")
    p.add_argument("--cpu", action="store_true", help="train on the CPU even when there are GPUs")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "checkpoint_every", "log_every"):
        if getattr(args, name) < (0 if name == "checkpoint_every" else 1):
            p.error(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'checkpoint_every' else 'at least 1'}")
    if args.max_steps is not None and args.max_steps < 0:
        p.error("--max-steps must not be negative")
    if args.lr <= 0:
        p.error("--lr must be positive")
    return args


class Net(nn.Module):
    """Two conv layers and two linear ones: ~100k parameters, a few ms a step on a CPU core."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class StopFlag:
    """SIGTERM / SIGINT ask for a clean stop at the next step once training runs; before that
    (data, process group) there is nothing to save, so they end the process at once. A
    second SIGINT interrupts."""

    def __init__(self):
        self.signal = None
        self.training = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on)

    def _on(self, signum, frame):
        if not self.training:
            print(f"mnist: {signal.Signals(signum).name} before training began: exiting", flush=True)
            raise SystemExit(128 + signum)
        if self.signal == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signum


# ------------------------------------------------------------------ setup ----
def distributed_env():
    """(rank, local_rank, world) from torchrun's contract; (0, 0, 1) for a plain run."""
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return rank, local, world


def pick_device(local_rank: int, force_cpu: bool):
    if not force_cpu and torch.cuda.is_available():
        dev = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(dev)  # before the process group, so nccl binds this GPU
        return torch.device("cuda", dev), "nccl"
    # Share the cores: N ranks each using every core would only fight over them.
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_world)))
    return torch.device("cpu"), "gloo"


def run_id() -> str:
    rid = os.environ.get("MPWATCH_RUN_ID") or os.environ.get("TORCHELASTIC_RUN_ID")
    if rid and rid != "none":
        return rid
    return "local"


def save_checkpoint(path: Path, state: dict):
    """Atomic: a kill mid-write leaves the previous checkpoint intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path):
    if not path.is_file():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - a broken checkpoint must not stop training
        print(f"mnist: cannot read checkpoint {path} ({exc}); starting afresh", flush=True)
        return None


def evaluate(model, images, labels, device, limit=2000):
    model.eval()
    with torch.no_grad():
        x, y = images[:limit].to(device), labels[:limit].to(device)
        out = model(x)
        loss = F.cross_entropy(out, y).item()
        acc = (out.argmax(1) == y).float().mean().item()
    model.train()
    return loss, acc


# ------------------------------------------------------------------ training ----
def main(argv=None) -> int:
    args = parse_args(argv)
    stop = StopFlag()
    rank, local_rank, world = distributed_env()
    device, backend = pick_device(local_rank, args.cpu)
    if args.max_steps is None:
        args.max_steps = 200 if device.type == "cpu" else 0  # a CPU demo that ends in under a minute
    if world > 1:
        dist.init_process_group(backend, timeout=timedelta(seconds=120))
    log0 = (lambda *a: print(*a, flush=True)) if rank == 0 else (lambda *a: None)
    print(f"rank {rank}: WORLD_SIZE {world}, {device}, backend {backend if world > 1 else 'none'}, "
          f"pid {os.getpid()}", flush=True)

    data = mnist_data.load(args.data_dir, download_ok=not args.no_download, say=log0)
    train_x, train_y = data.train.images, data.train.labels  # uint8: normalised per batch
    test_x, test_y = data.normalised(data.test), data.test.labels
    log0(f"data: {data.source}, {len(train_y)} training and {len(test_y)} test images from {data.where}")

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP broadcasts them anyway)
    net = Net().to(device)
    model = nn.parallel.DistributedDataParallel(net) if world > 1 else net
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)

    ckpt_dir = Path(args.checkpoint_dir or Path("checkpoints") / f"mnist-{run_id()}")
    ckpt_path = ckpt_dir / "latest.pt"
    step, epoch, seen_in_epoch = 0, 0, 0  # seen_in_epoch: samples of this epoch already trained on
    ckpt = load_checkpoint(ckpt_path)
    if ckpt is not None:
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        step, epoch, seen_in_epoch = ckpt["step"], ckpt["epoch"], ckpt["seen_in_epoch"]
        print(f"rank {rank}: resumed from {ckpt_path} at step {step} (epoch {epoch}, saved with "
              f"WORLD_SIZE {ckpt['world_size']}); now WORLD_SIZE {world}", flush=True)

    saved_at = [step if ckpt is not None else None]

    def checkpoint(why: str):
        if rank != 0 or saved_at[0] == step:
            return
        saved_at[0] = step
        save_checkpoint(ckpt_path, {"model": net.state_dict(), "optimizer": opt.state_dict(), "step": step,
                                    "epoch": epoch, "seen_in_epoch": seen_in_epoch, "world_size": world})
        print(f"rank 0: checkpoint at step {step} ({why}) -> {ckpt_path}", flush=True)

    params = [p for p in net.parameters()]
    flat = torch.zeros(sum(p.numel() for p in params) + 1, device=device)  # grads + the stop vote
    global_batch = args.batch_size * world
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(len(train_y)), num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True)
    steps_per_epoch = len(sampler) // args.batch_size
    log0(f"training: {steps_per_epoch} steps per epoch of {global_batch} samples ({world} x {args.batch_size}), "
         f"{args.epochs} epoch(s)" + (f", at most {args.max_steps} steps" if args.max_steps else ""))

    stop.training = True  # from here a signal means: checkpoint after this step, then exit
    done_reason = None
    steps_here = 0
    rate_t0, rate_n = None, 0  # throughput since the first steps (start-up excluded)
    rate = 0.0
    t_last, n_last = time.perf_counter(), 0
    while done_reason is None:
        if epoch >= args.epochs:
            done_reason = "epochs done"
            break
        sampler.set_epoch(epoch)
        # The same permutation for any world size; skip what earlier runs (of any size) covered.
        order = torch.tensor(list(iter(sampler)))
        start = min(seen_in_epoch // global_batch, steps_per_epoch)
        for i in range(start, steps_per_epoch):
            if args.max_steps and step >= args.max_steps:
                done_reason = f"max steps ({args.max_steps}) reached"
                break
            with mpwatch.phase("data"):
                idx = order[i * args.batch_size:(i + 1) * args.batch_size]
                x = mnist_data.normalise(train_x[idx]).to(device, non_blocking=True)
                y = train_y[idx].to(device, non_blocking=True)
            with mpwatch.phase("compute"):
                opt.zero_grad(set_to_none=False)
                if world > 1:
                    with model.no_sync():  # the all-reduce below is ours, timed as "sync"
                        loss = F.cross_entropy(model(x), y)
                        loss.backward()
                else:
                    loss = F.cross_entropy(model(x), y)
                    loss.backward()
            stop_vote = 1.0 if stop.signal is not None else 0.0
            if world > 1:
                with mpwatch.phase("sync"):
                    torch.cat([p.grad.reshape(-1) for p in params], out=flat[:-1])
                    flat[-1] = stop_vote
                    try:
                        dist.all_reduce(flat)
                    except Exception as exc:  # noqa: BLE001 - gloo/nccl raise several kinds
                        print(f"rank {rank}: lost a peer in the gradient all-reduce at step {step} "
                              f"({str(exc).splitlines()[0][:100]}); the last checkpoint is in {ckpt_path}",
                              flush=True)
                        return EXIT_PEER_LOST
                    flat[:-1].div_(world)
                    offset = 0
                    for p in params:
                        n = p.numel()
                        p.grad.copy_(flat[offset:offset + n].view_as(p))
                        offset += n
                    stop_vote = float(flat[-1].item())
            with mpwatch.phase("optimizer"):
                lr = mpwatch.tunable("lr", args.lr)  # the same step on every rank when changed
                for group in opt.param_groups:
                    group["lr"] = lr
                opt.step()
            step += 1
            seen_in_epoch = (i + 1) * global_batch
            now = time.perf_counter()
            steps_here += 1
            if steps_here == 3:  # throughput from the 3rd step of this process on: start-up excluded
                rate_t0, rate_n = now, 0
            elif rate_t0 is not None:
                rate_n += args.batch_size
            if now - t_last >= 0.5:
                rate = (rate_n - n_last) / (now - t_last) if rate_t0 is not None else 0.0
                t_last, n_last = now, rate_n
            mpwatch.report(step=step, loss=loss, samples_per_s=round(rate, 1), epoch=epoch)
            if step % args.log_every == 0:
                log0(f"step {step} epoch {epoch} loss {loss.item():.4f} samples/s {rate * world:.0f}")
            if stop_vote > 0:
                done_reason = (f"stopped by {signal.Signals(stop.signal).name}" if stop.signal is not None
                               else "stopped because another rank was stopped")
                break
            if mpwatch.should_checkpoint():  # `c` in mpwatch: True at the same step on every rank
                checkpoint("asked")
            elif args.checkpoint_every and step % args.checkpoint_every == 0:
                checkpoint("periodic")
        else:
            epoch, seen_in_epoch = epoch + 1, 0
            loss_t, acc_t = evaluate(net, test_x, test_y, device)
            log0(f"epoch {epoch - 1} done at step {step}: test loss {loss_t:.4f}, accuracy {acc_t:.1%}")

    checkpoint(done_reason)
    if not done_reason.startswith("stopped"):
        loss_t, acc_t = evaluate(net, test_x, test_y, device)
        log0(f"finished ({done_reason}) at step {step}: test loss {loss_t:.4f}, accuracy {acc_t:.1%}")
    elapsed = time.perf_counter() - rate_t0 if rate_t0 is not None else 0.0
    print(f"rank {rank}: {done_reason} at step {step}", flush=True)
    # The whole job's throughput: ranks move in lockstep, so this rank's rate times the world.
    print(f"samples/s: {rate_n * world / elapsed if elapsed > 0 else 0.0:.1f}", flush=True)
    if world > 1 and not done_reason.startswith("stopped"):
        dist.destroy_process_group()
    if done_reason == "stopped because another rank was stopped":
        return EXIT_PEER_STOPPED
    return 0


if __name__ == "__main__":
    sys.exit(main())
