"""The Textual UI: a client of a run's control socket, never an owner of its processes.

Layers, from pure to live: glyphs/bars/view/diff (pure functions, tested without a
terminal), poller (a thread that reads the control socket and posts snapshots),
widgets and screens (Textual), app (wires them), launch (the CLI's entry points).
"""
