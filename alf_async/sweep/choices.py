"""What a search can be told, kept apart from ``search`` (which imports Optuna)
so that ``alf-sweep`` checks its flags before Optuna is imported, or when it is
not installed."""

SAMPLERS = ("optuna", "random")  # --search
PRUNERS = ("median", "percentile", "successive_halving", "halving", "none")  # --pruner
