"""Watching a trained policy: loading it from a run (player) and recording video."""
