"""Several nodes' supervisors read as one run: one Source, their statuses merged by global rank."""
