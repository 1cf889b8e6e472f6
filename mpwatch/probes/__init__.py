"""Read-only samplers the supervisor calls: processes, GPUs (NVML), stacks, a hang's /proc facts."""
