"""The ranks' processes: state machine, process groups and kills, exits, reaping, the watchdog."""
