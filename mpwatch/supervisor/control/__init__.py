"""Control (issue 23): "checkpoint now" and tunables, sent down the workers' channels at one
step on every rank: the control room (room), the step rule (plan), the records (records)."""
