"""The live requests (issues 23, 32; docs/control.md): "checkpoint now", profiles and tunables, sent
down the workers' channels at one step on every rank: the live room (room), the actions' requests and answers
(actions), which ranks a request reaches and its step (reach, plan), the records (records)."""
