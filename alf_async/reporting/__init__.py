"""What users run around training: sweeps, the EPS report, configuration docs.

The modules hold the logic of the commands in ``alf_async.bin`` (sweep,
eps_report, play, gen_config_docs), split so that the computations are pure
functions that tests can check on fabricated data:

- ``grid``: the ``--sweep`` syntax, grid expansion and run names (pure).
- ``run_metrics``: reading ``metrics.jsonl`` and summarizing a run (pure).
- ``tables``: CSV and markdown tables (pure).
- ``eps_study``: the sync/async EPS table and time split (pure).
- ``report``: the markdown text of the EPS report (pure).
- ``plots``: PNG figures (matplotlib, Agg backend).
- ``machine``: a description of the machine a study ran on.
- ``sweep_runner``: running a grid of training runs as subprocesses.
- ``video``: writing frames to a GIF or MP4 file.
- ``gin_reference``: the configuration reference generated from the code.

Importing this package is cheap: heavy libraries are imported where used.
"""
