"""Reading runs and reporting on them: metrics, the EPS study, tables, plots.

Pure computations that tests can check on fabricated data, used by the
``eps_report`` and ``sweep`` commands:

- ``run_metrics``: reading ``metrics.jsonl`` as ``IterationRecord``s and
  summarizing a run (pure);
- ``tables``: CSV and markdown tables (pure);
- ``eps_study``: the sync/async EPS table and time split (pure);
- ``report``: the markdown text of the EPS report (pure);
- ``plots``: PNG figures (matplotlib, Agg backend);
- ``machine``: a description of the machine a study ran on.

Sweeps live in ``alf_async.sweep``, playback and video in ``alf_async.playback``,
the configuration reference in ``alf_async.gin_reference``. Importing this package
is cheap: heavy libraries are imported where used.
"""
