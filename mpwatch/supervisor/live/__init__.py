"""Live control: checkpoint requests and tunables, sent down the workers' channels."""
