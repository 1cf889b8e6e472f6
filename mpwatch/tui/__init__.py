"""The Textual UI: a client of a run's source, never an owner of its processes.

From pure to live: render/ (glyphs, bars, the worker table's rows, the GPU panel and screen,
the row diff: pure functions of a contract.status Status, tested on statuses recorded from
real runs); poller (a thread that reads a sources.source.Source and posts snapshots);
widgets/ and screens/ (Textual); keys (the one key table: footer, command palette, help);
view_actions and actions (what the keys do), app and replay_app (the Apps that wire them).
The CLI starts them from cli.tui_launch and cli.show.
"""
