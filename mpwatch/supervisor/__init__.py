"""The headless owner of a run: workers, channels, stall detection, control socket."""
