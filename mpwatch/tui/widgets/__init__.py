"""The main screen's Textual widgets: the worker table, header, GPU panel, loss plot, replay strip."""
