"""The GPUs during a run: the NVML poller, which GPU is whose, the alert decisions, the timeline."""
