"""Every way the TUI reads a run: the local socket, ssh (remote), several nodes (multinode), replay."""
