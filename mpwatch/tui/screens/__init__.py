"""The screens over the main one (detail, logs, GPUs, events, tunables, help) and the dialogs."""
