"""Everything mpwatch runs inside a training process: the channel to the supervisor and its
sender thread, the public calls (api, control), the CUDA view, the automatic steps (auto/) and
the start-up hook every worker loads (boot/). Standard library only at import: nothing here
imports the supervisor, the TUI, the probes or torch."""
