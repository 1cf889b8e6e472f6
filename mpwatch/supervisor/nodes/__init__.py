"""A multi-node run, one supervisor per node: torch's rendezvous, the node thread, the cluster's view."""
