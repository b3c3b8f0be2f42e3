"""Which part of a lagged PPO update narrows the policy: counterfactual steps on
the same batches (issue 53).

Trains a run the way ``alf_async.train`` does (``--gin_file``, ``--bindings``,
``--root_dir``), with the learner's ``train`` wrapped: before each real
iteration, the learner is copied (weights, optimizer moments, observation
statistics, minibatch generator) once per variant, the copy trains on the same
batch with the variant's loss, and the change of the policy's mean log action
std over that one iteration is recorded; then the real iteration runs as
configured. Every variant of an iteration sees the same batch and the same
minibatch order, so their differences are the loss's alone. The variant
``as_configured`` reruns the real step: its change must equal the real one
(``check_error``), which proves the copies start where the learner is.

Variants (one binding each, on the copy):

- ``as_configured``: the run's own settings;
- ``proximal_moments``: ``advantage_moments = "proximal"`` (the advantages
  centred and scaled under pi_prox, weights pi_prox / mu);
- ``uncentred``: the advantages divided by their std, not centred;
- ``none``: ``lag_correction = "none"`` (PPO2's clip on pi / mu, unweighted);
- ``no_weights``: the decoupled clip around pi_prox without the pi_prox / mu
  weights (mu's log-probs replaced by pi_prox's after the advantages are
  computed);
- ``decoupled``: ``lag_correction = "decoupled"`` (GAE's advantages and
  value targets on the values the run uses, not V-trace's; the same loss);
- ``gae_advantages``: GAE's advantages with the run's own value targets
  (V-trace's, for "vtrace_gae"): only the policy's advantages change;
- ``untruncated_traces``: V-trace's traces truncated at ``rho_bar`` instead
  of ``c_bar`` (``c_bar = rho_bar``: with rho_bar 100, importance-weighted
  GAE);
- ``lower_lambda``: ``gae_lambda`` times 0.9 (``LOWER_LAMBDA_SHARE``);
- ``no_clip``: ``clip_ratio = 1e6`` (the KL budget, where bound, still ends
  the iteration).

A stale batch gets every variant; a fresh one (acted by the learner's
current weights on the inputs it trains on, as every sync batch is:
``PPOLearner._acted_by_current_weights``) all but ``STALE_ONLY``'s, which
equal PPO2 on it.

Output: ``--out`` (a new file) gets one JSON line per iteration {iteration,
lag, action_std (exp of the mean log std before the step: a geometric mean
over action dims, where the metrics' action_std is the arithmetic one),
real (the real step's d log std),
check_error, variants: {name: {d_log_std, approx_kl, clip_fraction,
gradient_steps}}}; stdout one JSON line whose ``summary`` gives, per lag,
each variant's mean d log std and its mean difference from
``as_configured``'s on the same batches (with its standard error, naive and
allowing for the correlation of consecutive iterations).

    python -m bench.width_decomposition --gin_file async_ppo_bullet_ant.gin --root_dir /tmp/wd --out wd.jsonl --bindings Trainer.num_env_steps=300000 Trainer.seed=0
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
from collections import defaultdict
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

import torch

import alf_async
from alf_async.algorithms import ppo_learner as ppo_learner_module
from alf_async.algorithms import ppo_loss as ppo_loss_module
from alf_async.algorithms import value_ops
from alf_async.algorithms.ppo_learner import PPOLearner
from bench.benchlib import emit, machine_info

STALE_ONLY = ("proximal_moments", "none", "no_weights", "decoupled", "gae_advantages",
              "untruncated_traces")
VARIANTS = ("as_configured", "proximal_moments", "uncentred", "none", "no_weights",
            "decoupled", "gae_advantages", "untruncated_traces", "lower_lambda", "no_clip")
# lower_lambda's gae_lambda, as a share of the run's: about what V-trace's traces
# min(1, pi_prox / mu) leave of lambda at a behaviour KL of 0.03 (1 - TV).
LOWER_LAMBDA_SHARE = 0.9


def mean_log_std(learner: PPOLearner) -> float:
    """The mean over action dims of the policy's log std, clamped to the
    network's [min_log_std, max_log_std] as the policy uses it (a
    state-independent std only)."""
    actor = learner.model.actor
    log_std = actor.log_std.detach().clamp(actor.min_log_std, actor.max_log_std)
    return float(log_std.mean())


def check_supported(learner: PPOLearner) -> None:
    """Refuses a learner whose action std this script cannot read."""
    actor = getattr(learner.model, "actor", None)
    if (actor is None or actor.action_spec.discrete or actor.state_dependent
            or learner.state_size):
        raise SystemExit("width_decomposition: needs a feed-forward PPO policy with "
                         "continuous actions and a state-independent std (no gSDE, "
                         "no recurrent core)")


def _uncentred(advantages: torch.Tensor, epsilon: float = 1e-8,
               valid: Optional[torch.Tensor] = None,
               weight: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A / std(A) [B]: scaled as PPO2 scales (the std over the ``valid``
    samples), not centred; ``weight`` is ignored."""
    centred = advantages - ppo_loss_module.masked_mean(advantages, valid)
    return advantages / (ppo_loss_module.masked_mean(centred * centred, valid).sqrt() + epsilon)


@contextlib.contextmanager
def _patched(module: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def _without_weights(loss: Callable[..., Any]) -> Callable[..., Any]:
    """ppo_loss with mu's log-probs set to pi_prox's: weights 1, clip on pi_prox."""
    def wrapped(log_prob, old_log_prob, advantages, value, returns, entropy, clip_ratio,
                value_loss_weight, entropy_coef, normalize_advantage, proximal=None,
                *rest):
        if proximal is not None:
            old_log_prob = proximal
        return loss(log_prob, old_log_prob, advantages, value, returns, entropy, clip_ratio,
                    value_loss_weight, entropy_coef, normalize_advantage, proximal, *rest)
    return wrapped


def _gae_advantages(compute: Callable[..., Any]) -> Callable[..., Any]:
    """advantages_and_returns with GAE's advantages and the run's own returns."""
    def wrapped(rewards, values, batch, gamma, gae_lambda, log_rho=None, *rest, **kwargs):
        _, returns = compute(rewards, values, batch, gamma, gae_lambda, log_rho, *rest,
                             **kwargs)
        advantages, _ = compute(rewards, values, batch, gamma, gae_lambda)
        return advantages, returns
    return wrapped


@contextlib.contextmanager
def variant_context(name: str, learner: PPOLearner) -> Iterator[None]:
    """Sets ``learner`` (a copy) up for variant ``name`` while the context is open."""
    if name == "proximal_moments":
        learner.advantage_moments = "proximal"
    elif name == "none":
        learner.lag_correction = "none"
    elif name == "decoupled":
        learner.lag_correction = "decoupled"
    elif name == "untruncated_traces":
        learner.c_bar = learner.rho_bar
    elif name == "lower_lambda":
        learner.gae_lambda = LOWER_LAMBDA_SHARE * learner.gae_lambda
    elif name == "no_clip":
        learner.clip_ratio = 1e6
    if name == "uncentred":
        with _patched(ppo_loss_module, "normalize_advantages", _uncentred):
            yield
    elif name == "no_weights":
        with _patched(ppo_learner_module, "ppo_loss", _without_weights(ppo_loss_module.ppo_loss)):
            yield
    elif name == "gae_advantages":
        with _patched(ppo_learner_module, "advantages_and_returns",
                      _gae_advantages(value_ops.advantages_and_returns)):
            yield
    else:
        yield


@contextlib.contextmanager
def counterfactual_steps(out_path: str, variants: Sequence[str]
                         ) -> Iterator[List[Dict[str, Any]]]:
    """While open, PPOLearner.train runs ``variants`` on copies before each real
    iteration; yields the list the iterations' records go to (also appended
    to ``out_path`` as JSON lines)."""
    records: List[Dict[str, Any]] = []
    real_train = PPOLearner.train

    def train(self: PPOLearner, batch, behaviour_version=None, progress=None):
        check_supported(self)
        lag = None if behaviour_version is None else self.iteration - int(behaviour_version)
        # pi_prox = mu exactly (the learner's own test): the lag corrections are PPO2
        fresh = self._acted_by_current_weights(behaviour_version)
        before = mean_log_std(self)
        row: Dict[str, Any] = {"iteration": self.iteration, "lag": lag,
                               "action_std": math.exp(before), "variants": {}}
        for name in variants:
            if fresh and name in STALE_ONLY:
                continue
            twin = copy.deepcopy(self)
            with variant_context(name, twin):
                stats = real_train(twin, batch, behaviour_version, progress)
            row["variants"][name] = {"d_log_std": mean_log_std(twin) - before,
                                     "approx_kl": stats.get("approx_kl"),
                                     "clip_fraction": stats.get("clip_fraction"),
                                     "gradient_steps": stats.get("gradient_steps")}
            del twin
        stats = real_train(self, batch, behaviour_version, progress)
        row["real"] = mean_log_std(self) - before
        if "as_configured" in row["variants"]:
            row["check_error"] = abs(row["variants"]["as_configured"]["d_log_std"] - row["real"])
        with open(out_path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
        records.append(row)
        return stats

    PPOLearner.train = train
    try:
        yield records
    finally:
        PPOLearner.train = real_train


def newey_west_stderr(values: Sequence[float]) -> Optional[float]:
    """Standard error of the mean of a series whose neighbours are correlated
    (consecutive iterations of one run): Newey-West with Bartlett weights
    1 - k / (L + 1) for lags k = 1..L, L = floor(n ** (1/3)). None for fewer
    than three values; 0.0 where the weighted variance comes out negative."""
    n = len(values)
    if n < 3:
        return None
    mean = sum(values) / n
    centred = [v - mean for v in values]
    longest = 0  # the floor of n's cube root, in integers (float 64 ** (1/3) < 4)
    while (longest + 1) ** 3 <= n:
        longest += 1
    variance = sum(c * c for c in centred) / n
    for k in range(1, longest + 1):
        autocovariance = sum(centred[i] * centred[i - k] for i in range(k, n)) / n
        variance += 2.0 * (1.0 - k / (longest + 1.0)) * autocovariance
    return math.sqrt(max(variance, 0.0) / n)


def summarize(rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Per lag: iterations, mean real d log std, per variant mean d log std and
    its mean difference from as_configured's on the same batches, with two
    standard errors of that difference: ``stderr`` takes the iterations as
    independent (None for one iteration), ``stderr_autocorrelated`` allows for
    the correlation of consecutive iterations (``newey_west_stderr``, in the
    order of the rows; None for fewer than three)."""
    by_lag: Dict[str, List[Dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_lag[str(row["lag"])].append(row)
    summary: Dict[str, Any] = {}
    for lag, group in sorted(by_lag.items()):
        entry: Dict[str, Any] = {"iterations": len(group),
                                 "real_d_log_std": sum(r["real"] for r in group) / len(group)}
        for name in VARIANTS:
            pairs = [(r["variants"][name]["d_log_std"],
                      r["variants"]["as_configured"]["d_log_std"])
                     for r in group if name in r["variants"] and "as_configured" in r["variants"]]
            if not pairs:
                continue
            diffs = [a - b for a, b in pairs]
            n = len(diffs)
            mean_diff = sum(diffs) / n
            stderr = None
            if n > 1:
                stderr = math.sqrt(sum((d - mean_diff) ** 2 for d in diffs) / (n - 1) / n)
            entry[name] = {"d_log_std": sum(a for a, _ in pairs) / n,
                           "minus_configured": mean_diff, "stderr": stderr,
                           "stderr_autocorrelated": newey_west_stderr(diffs)}
        summary[lag] = entry
    checks = [r["check_error"] for r in rows if "check_error" in r]
    summary["max_check_error"] = max(checks) if checks else None
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gin_file", required=True)
    parser.add_argument("--root_dir", required=True)
    parser.add_argument("--out", required=True, help="per-iteration JSON lines")
    parser.add_argument("--bindings", nargs="*", default=[])
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; known: {', '.join(VARIANTS)}")
    # the reference every difference is taken from, and the copies' check
    variants = ["as_configured"] + [v for v in variants if v != "as_configured"]
    if os.path.exists(args.out):
        parser.error(f"--out {args.out} exists: give a new file (its records would mix runs)")
    with counterfactual_steps(args.out, variants) as records:
        counters = alf_async.train(args.gin_file, args.root_dir, bindings=args.bindings)
    emit({"bench": "width_decomposition", "gin_file": args.gin_file,
          "bindings": args.bindings, "env_steps": counters.get("env_steps"),
          "summary": summarize(records), "machine": machine_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
