"""bf16 against fp32 gradients on a trained run's checkpoint (issue 56).

tests/test_precision.py holds a bf16 gradient step to the float32 one at
initialization; this script asks the same of a trained network, where the
gradients are smaller and the logits larger. It loads a PPO run's checkpoint
(``--checkpoint``, default: the newest in ``--run_dir``) into two learners
built from the run's config.gin, one under ``precision = "fp32"`` and one
under ``"bf16"``; plays the run's env with the checkpoint's sampling policy
in float32 (K = ``--num_envs`` envs x T = ``--unroll_length`` steps, real
frames and rewards, acted once for both learners); recomputes the batch's
log-probabilities and values with each learner's network in its own
precision, as that learner's actors would (so every ratio is 1); and gives
each learner its [T, K] batch for one epoch of minibatches of
``--mini_batch_size`` with the checkpoint's weights (learning rate 1e-12, so
every minibatch sees them; gradient clipping off). For minibatch i, g32_i
and g16_i are the two learners' gradients (all parameters, flattened; the
same frames: both learners draw the same minibatch order from the
checkpoint's generator).

Output, one JSON line:

- ``cosine``: cos(g32_i, g16_i) per minibatch; ``norm_ratio``: |g16_i| / |g32_i|;
- ``minibatch_cosine``: cos(g32_i, g32_j) for i < j, how far two minibatches'
  float32 gradients point apart (the sampling noise bf16's rounding adds to);
- ``log_prob_gap_mean`` / ``_max``, ``value_gap_mean``: |bf16 - fp32| of the
  batch's log-probabilities and values (nats; the env's reward units);
- ``step``: what bf16's rounding does to the ratio PPO clips. For each of
  ``--step_sizes`` s, both learners' weights move by -s * sign(g32_1) (the
  first minibatch's float32 gradient: about what Adam's first step does
  at learning rate s) and the batch's log-probabilities are recomputed in
  each precision; d32 and d16 are the changes of log pi (the log-ratios
  the clip reads). Per s: ``change_mean`` mean |d32|, ``error_mean`` mean
  |d16 - d32|, and ``clip_disagreement``, the fraction of the batch's steps
  where |d16| and |d32| fall on different sides of ``--clip``;
- the checkpoint, its env steps, the batch's nonzero rewards.

    python -m bench.precision_gradients --run_dir runs/pong/alf_async_s1
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional

import gin
import numpy as np
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.envs.spaces import EnvActions
from alf_async.playback.player import find_checkpoint, load_run
from alf_async.policy_api import Policy
from alf_async.runtime.trajectory import allocate_trajectory
from alf_async.utils.precision import compute_context
from bench import benchlib


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run_dir", required=True, help="a PPO run directory")
    p.add_argument("--checkpoint", default=None,
                   help="a checkpoint file of the run (default: its newest)")
    p.add_argument("--num_envs", type=int, default=8, help="K")
    p.add_argument("--unroll_length", type=int, default=128, help="T")
    p.add_argument("--mini_batch_size", type=int, default=256)
    p.add_argument("--seed", type=int, default=0, help="seeds the envs' resets and the acting")
    p.add_argument("--step_sizes", default="1e-4,1e-3",
                   help="comma-separated weight steps s of the ratio measurement")
    p.add_argument("--clip", type=float, default=0.04,
                   help="the clip range of the ratio measurement (the Pong file's 0.1 "
                        "annealed to 60%% of its run)")
    return p.parse_args(argv)


def play(run: Any, learner: PPOLearner, T: int, K: int, seed: int) -> Dict[str, np.ndarray]:
    """A [T, K] batch of the run's env acted by ``learner``'s weights in float32."""
    acting = NeuralPolicy(run.observation_spec, run.action_spec, seed=seed)
    acting.load_weights(learner.weight_arrays())
    to_env = EnvActions(run.action_space, run.action_spec)
    envs = [Policy(run).make_env() for _ in range(K)]  # the env as the run made it
    try:
        observation = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(envs)])
        batch = allocate_trajectory(T, K, run.observation_spec, run.action_spec.dim)
        for t in range(T):
            batch["observation"][t] = observation
            action, log_prob, value = acting.act(observation)
            batch["action"][t], batch["log_prob"][t], batch["value"][t] = action, log_prob, value
            for i, (env, env_action) in enumerate(zip(envs, to_env(action))):
                next_observation, reward, terminated, truncated, _ = env.step(env_action)
                if terminated or truncated:
                    next_observation, _ = env.reset()
                observation[i] = next_observation
                batch["reward"][t, i], batch["terminated"][t, i] = reward, terminated
        batch["final_observation_row"][:] = -1
        batch["bootstrap_value"][:] = acting.value(observation)
        return batch
    finally:
        for env in envs:
            env.close()


def in_own_precision(learner: PPOLearner, batch: Dict[str, np.ndarray]
                     ) -> Dict[str, np.ndarray]:
    """``batch`` with its log-probabilities and values [T, K] computed by
    ``learner``'s network in ``learner``'s precision, as an actor following
    that learner computes them: every ratio is then 1 under either precision
    (the bootstrap values [K] stay the float32 acting policy's)."""
    T, K = batch["reward"].shape
    frames = batch["observation"]
    observation = torch.from_numpy(frames.reshape(T * K, *frames.shape[2:]))
    if learner.normalize_observations:
        observation = learner.normalizer.normalize(observation.float())
    action = torch.from_numpy(batch["action"].reshape(T * K, -1))
    own = dict(batch)
    with torch.no_grad(), compute_context(learner.device, learner.precision.bf16):
        log_prob, value = learner.model.log_prob_and_value(observation, action, chunk_rows=256)
    own["log_prob"] = log_prob.reshape(T, K).numpy()
    own["value"] = value.reshape(T, K).numpy()
    return own


def minibatch_gradients(learner: PPOLearner, state: Dict[str, Any],
                        batch: Dict[str, np.ndarray]) -> List[torch.Tensor]:
    """Each minibatch's flat gradient [P] over one epoch from ``state``."""
    gradients: List[torch.Tensor] = []
    step = learner.optimizer.step

    def recording_step(*args: Any, **kwargs: Any) -> Any:
        gradients.append(torch.cat([p.grad.detach().reshape(-1).clone()
                                    for p in learner.model.parameters()]))
        return step(*args, **kwargs)

    learner.optimizer.step = recording_step
    learner.load_state_dict(state)
    learner.train(batch, behaviour_version=None)
    return gradients


def step_log_ratios(learners: Dict[str, PPOLearner], state: Dict[str, Any],
                    batch: Dict[str, np.ndarray], direction: torch.Tensor, step_size: float,
                    clip: float) -> Dict[str, float]:
    """Move both learners' weights from ``state`` by ``-step_size *
    sign(direction)`` (``direction``: a flat gradient [P]) and compare the
    changes of the batch's log-probabilities [T, K] in each precision (the
    module doc's ``step``)."""
    for learner in learners.values():
        learner.load_state_dict(state)
    before = {p: in_own_precision(learners[p], batch)["log_prob"] for p in learners}
    for learner in learners.values():
        with torch.no_grad():
            offset = 0
            for parameter in learner.model.parameters():
                size = parameter.numel()
                parameter -= step_size * direction[offset:offset + size].reshape(
                    parameter.shape).sign()
                offset += size
    after = {p: in_own_precision(learners[p], batch)["log_prob"] for p in learners}
    for learner in learners.values():
        learner.load_state_dict(state)
    d32 = after["fp32"] - before["fp32"]
    d16 = after["bf16"] - before["bf16"]
    return {"change_mean": round(float(np.abs(d32).mean()), 6),
            "error_mean": round(float(np.abs(d16 - d32).mean()), 6),
            "clip_disagreement": round(float(np.mean((np.abs(d16) > clip)
                                                     != (np.abs(d32) > clip))), 4)}


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    torch.set_num_threads(1)
    saved, checkpoint = find_checkpoint(args.run_dir, args.checkpoint)
    run = load_run(args.run_dir, checkpoint, args.seed)
    gin.clear_config()
    gin.parse_config_files_and_bindings([os.path.join(args.run_dir, "config.gin")], [],
                                        skip_unknown=True)
    try:
        learners = {precision: PPOLearner(
            run.observation_spec, run.action_spec, num_epochs=1,
            mini_batch_size=args.mini_batch_size, max_grad_norm=0.0, learning_rate=1e-12,
            precision=precision, seed=args.seed) for precision in ("fp32", "bf16")}
        for learner in learners.values():
            learner.load_state_dict(saved["learner"])
        batch = play(run, learners["fp32"], args.unroll_length, args.num_envs, args.seed)
    finally:
        gin.clear_config()
    own = {p: in_own_precision(learners[p], batch) for p in learners}
    g32, g16 = (minibatch_gradients(learners[p], saved["learner"], own[p])
                for p in ("fp32", "bf16"))
    steps = {size: step_log_ratios(learners, saved["learner"], batch, g32[0], float(size),
                                   args.clip)
             for size in args.step_sizes.split(",")}
    log_prob_gap = np.abs(own["bf16"]["log_prob"] - own["fp32"]["log_prob"])
    value_gap = np.abs(own["bf16"]["value"] - own["fp32"]["value"])

    def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
        return round(float(torch.nn.functional.cosine_similarity(a, b, dim=0)), 5)

    benchlib.emit({
        "bench": "precision_gradients", "checkpoint": os.path.abspath(checkpoint),
        "env_steps": int(saved["counters"]["env_steps"]),
        "batch": [args.unroll_length, args.num_envs], "mini_batch_size": args.mini_batch_size,
        "nonzero_rewards": int(np.count_nonzero(batch["reward"])),
        "log_prob_gap_mean": round(float(log_prob_gap.mean()), 5),
        "log_prob_gap_max": round(float(log_prob_gap.max()), 5),
        "value_gap_mean": round(float(value_gap.mean()), 5),
        "cosine": [cosine(a, b) for a, b in zip(g32, g16)],
        "norm_ratio": [round(float(b.norm() / a.norm()), 4) for a, b in zip(g32, g16)],
        "minibatch_cosine": [cosine(g32[i], g32[j]) for i in range(len(g32))
                             for j in range(i + 1, len(g32))],
        "step": {"clip": args.clip, **steps},
        **benchlib.machine_info()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
