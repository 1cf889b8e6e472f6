"""Widgets of the main screen and the detail view, and the pure bar/sparkline helpers."""
