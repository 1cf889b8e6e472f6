"""A run's files: one layout, one writer, one reader, thinning, the registry of live runs, the post-mortem."""
