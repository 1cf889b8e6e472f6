"""Why a worker is stuck: the process sampler, stall decisions, stack dumps, the NCCL flight recorder."""
