"""Live control (issue 23): "checkpoint now" and tunables, sent down the workers' channels at one
step on every rank: the control room (control), the step rule (plan), the records (records)."""
