"""The Textual UI: a client of a run's control socket, never an owner of its processes.

Layers, from pure to live: glyphs, bars, view (the worker table), gpu_rows (the GPU panel),
gpu_charts and gpu_tables (the GPU screen), diff (pure functions of a Status typed by
contract.status, tested on statuses recorded from real runs); source (what a screen reads
from), poller (a thread that reads it and posts snapshots); widgets and screens (Textual);
actions and app (wire them); launch (the CLI's entry points).
"""
