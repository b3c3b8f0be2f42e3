"""Sweeps: a grid of training runs (grid syntax), run as subprocesses (runner),
summarized in tables (summary)."""
