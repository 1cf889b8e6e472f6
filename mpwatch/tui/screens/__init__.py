"""Screens over the main one: detail, logs, help, filter, and the confirm/quit dialogs."""
