"""Read-only samplers the supervisor calls: processes, GPUs, stacks."""
