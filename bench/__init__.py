"""Benchmarks of alf_async, each printing one JSON line of figures.

Run from the repository root as modules: ``python -m bench.<name>``.
"""
