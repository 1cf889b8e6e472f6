"""The worker of scripts/gpu-check: every rank allocates a known amount of CUDA memory on GPU 0.

    gpu_alloc.py GO_FILE MIB

Every rank uses cuda:0 on purpose (the contention alert must fire); gpu-check may hide
GPUs with CUDA_VISIBLE_DEVICES so that torch's device 0 is another NVML index. Step 0: CUDA is
initialised and the kernels used later are loaded (lazy module loading would otherwise
grow the context during the measured allocation), then the cache is emptied, so what
NVML shows for the process is the CUDA context alone. Once GO_FILE exists: rank r
allocates (r + 1) * MIB MiB, touches it, reports step 1 with torch's own figures, and
keeps reporting until it is stopped.
"""
import os
import sys
import time

import torch

import mpwatch

go, mib = sys.argv[1], int(sys.argv[2])
rank = int(os.environ.get("RANK", "0"))
dev = torch.device("cuda", 0)

warm = torch.empty(2 << 20, dtype=torch.uint8, device=dev)
warm.fill_(1)
torch.cuda.synchronize(dev)
del warm
torch.cuda.empty_cache()
mpwatch.report(step=0, loss=0.0, torch_reserved=torch.cuda.memory_reserved(dev), pid=os.getpid())
print(f"rank {rank} (pid {os.getpid()}): CUDA ready on {torch.cuda.get_device_name(dev)}", flush=True)

while not os.path.exists(go):
    time.sleep(0.05)

nbytes = (rank + 1) * mib << 20
block = torch.empty(nbytes, dtype=torch.uint8, device=dev)
block.fill_(1)
torch.cuda.synchronize(dev)
figures = {"torch_reserved": torch.cuda.memory_reserved(dev), "torch_allocated": torch.cuda.memory_allocated(dev),
           "asked": nbytes, "t_alloc": time.time(), "pid": os.getpid(),
           "torch_uuid": str(torch.cuda.get_device_properties(dev).uuid)}
# What the sender thread's CUDA view costs here, torch's own call included (once a second in a run).
from mpwatch.worker.cuda import TorchCuda  # noqa: E402 - after CUDA is up, as in a training script

view = TorchCuda()
view()
t0 = time.perf_counter()
for _ in range(200):
    view()
figures["cuda_view_us"] = (time.perf_counter() - t0) / 200 * 1e6
print(f"rank {rank}: allocated {nbytes >> 20} MiB; torch reserved {figures['torch_reserved'] >> 20} MiB", flush=True)
step = 1
while True:  # until gpu-check stops the run
    mpwatch.report(step=step, loss=1.0 / step, **figures)
    step += 1
    time.sleep(0.2)
