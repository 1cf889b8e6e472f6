"""Torch imported once: the run's forkserver (worker.boot.forkserver), what it preloads, and how
the run starts its workers (forked by it, or by exec where that cannot hold)."""
