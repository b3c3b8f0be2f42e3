"""Sampler efficiency: how close an actor process gets to the raw env speed.

Two modes, for each W (env-worker processes per actor) and S (env splits):

``--mode interleaved`` (the default): an ``Actor`` built in this process from
the config (its BatchedEnv with W env workers and S splits, the config's policy
with a fresh learner's weights and normalizer statistics: the code an actor
process runs) unrolls ``--unroll_length`` steps, then persistent raw stepping
processes (``raw_env.RawSteppers``: the same K envs over max(W, 1) processes,
random actions, no policy, no communication) step as many, ``--cycles`` times
in turn; limit_fraction = the actor's env steps/s over the limit's (target >=
0.85: a result's "pass"). Interleaving chunk by chunk sets both against the
same machine: this VM's speed drifts by 10-30% within a minute, so limits
measured only before and after a run of a minute or more can be off by that
much (seen: 1877 before, 2500 after one 40 s run).

``--mode train``: a short synchronous training run (N = 1 actor process, the
"process" backend, through the train command); its metrics.jsonl gives, after
skipping ``--warmup`` iterations:

- actor_steps_per_s = K * unroll_length / actor_unroll_s: the actor process's
  env steps/s while it unrolls, with the policy in the loop and the trajectory
  written into its shared-memory slot (the transport of the payload);
- end_to_end_steps_per_s = K * unroll_length / (T - learner_train_s): the same
  seen from the learner. With N = 1 everything in an iteration that is not
  training is one cycle of the actor (slot release message, weight load, unroll,
  BatchReady message) plus the learner's own bookkeeping (metrics), so this adds
  the message, weight-loading and bookkeeping costs to the unroll. It can read
  slightly above actor_steps_per_s: the slot is released just before the
  iteration's end is timed, so the actor's next unroll starts a little before T
  does;
- raw_steps_per_s: BatchedEnv.step with random actions at the same K and W, in
  this process, measured after the run (nothing else running);
- efficiency = actor_steps_per_s / raw_steps_per_s, and
  end_to_end_efficiency likewise;
- limit_steps_per_s: the machine's raw limit for this configuration, measured
  in the same run: K envs stepped by max(W, 1) processes at once (K / W each,
  random actions, no policy, no communication; ``measure_raw_env_processes``),
  right before and right after the training run (the VM's speed drifts by
  10-30% within minutes; both are reported, their mean is the limit), and
  limit_fraction = actor_steps_per_s / limit_steps_per_s (target >= 0.85: a
  result's "pass");
  raw_one_process_steps_per_s is the same with one process;
- machine_fraction = actor_steps_per_s / (cores x raw one-process rate): the
  older estimate of the limit, kept for comparison with earlier reports (the
  cores of a VM need not scale; the measured limit above is the one to read).

Each W >= 1 is measured with ``--splits`` (default 1 and 2: double-buffered
sampling, ``Trainer.env_splits``); W = 0 only with 1 split (in one process the
splits cannot overlap).

Episodes end at different rates under random and policy actions, and resets
are costly, so the efficiency can move by several percent either way from that
alone (above 1.0 is possible): compare ``raw_episodes_per_1k_steps`` with
``actor_episodes_per_1k_steps``.

The learner trains with ``--num_epochs`` (default 1) so that runs are short; with
N = 1 the learner is idle while the actor unrolls, so this does not change what
is measured. On a machine with fewer cores than 1 + W processes the figures
depend on scheduling; compare ``load_avg_1m`` before trusting them.

Output: one JSON line {"bench": "sampler_efficiency", ..., "raw_one_process_steps_per_s":
..., "cores": ..., "results": [{"W": ..., "splits": ..., "efficiency": ...,
"limit_steps_per_s": ..., "limit_fraction": ..., "machine_fraction": ..., "pass":
...}, ...], "pass": all passed}.

Output fields of the interleaved mode: actor_steps_per_s, limit_steps_per_s,
limit_fraction, actor_inference_frac, actor_env_wait_frac, cycles, pass.

Full size:  python -m bench.sampler_efficiency
HalfCheetah: python -m bench.sampler_efficiency --gin_file ppo_bullet_half_cheetah.gin --num_envs 16
Smoke run:  python -m bench.sampler_efficiency --num_envs 4 --workers 0,1 --unroll_length 32 --cycles 2
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any, Dict, List

import numpy as np

from alf_async.utils.process import usable_cores
from bench import benchlib, children, raw_env

logger = logging.getLogger("bench")
TARGET = 0.85


def parse_args(argv: List[str] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gin_file", default="ppo_bullet_humanoid.gin",
                   help="base config (env id and networks come from it)")
    p.add_argument("--env", default=None, help="override Trainer.env_name")
    p.add_argument("--num_envs", type=int, default=32, help="K")
    p.add_argument("--workers", default="0,1,2", help="comma-separated W values")
    p.add_argument("--splits", default="1,2", help="comma-separated env_splits values")
    p.add_argument("--unroll_length", type=int, default=128)
    p.add_argument("--iterations", type=int, default=8, help="training iterations per run")
    p.add_argument("--warmup", type=int, default=2, help="iterations skipped")
    p.add_argument("--num_epochs", type=int, default=1,
                   help="PPO epochs per iteration (only shortens the run)")
    p.add_argument("--raw_unrolls", type=int, default=4,
                   help="the raw measurement steps this many unroll lengths")
    p.add_argument("--target", type=float, default=TARGET)
    p.add_argument("--mode", choices=("interleaved", "train"), default="interleaved",
                   help="interleaved: an in-process Actor and the raw limit, chunk by "
                        "chunk; train: a training run, the limit before and after it")
    p.add_argument("--cycles", type=int, default=12,
                   help="interleaved mode: unroll / raw-limit chunks")
    benchlib.add_common_train_args(p)
    return p.parse_args(argv)


def env_name_of(args: argparse.Namespace) -> str:
    return args.env or benchlib.config_value(args.gin_file, args.gin_param,
                                             "Trainer.env_name")


def run_interleaved(args: argparse.Namespace, env_name: str, w: int, splits: int
                    ) -> Dict[str, Any]:
    """The actor's unroll rate and the raw limit, interleaved chunk by chunk.

    An ``Actor`` (the code actor processes run: its BatchedEnv with W env
    workers and S splits, the config's policy with the weights and normalizer
    statistics a fresh learner publishes) unrolls ``unroll_length`` steps,
    then ``RawSteppers`` step the same K envs in max(W, 1) processes as often,
    ``--cycles`` times; each rate is the chunks' env steps over their seconds.
    """
    import gin

    from alf_async.algorithms.policy import NeuralPolicy
    from alf_async.config import parse_config
    from alf_async.runtime.actor import Actor
    from alf_async.runtime.trajectory import allocate_trajectory
    from alf_async.settings import TrainerSettings
    from alf_async.training.parts import make_learner, read_env_spec

    import torch

    torch.set_num_threads(1)  # as in an actor process (build_policy_factory)
    K, T = args.num_envs, args.unroll_length
    parse_config([args.gin_file], [f"Trainer.env_name='{env_name}'", f"Trainer.num_envs={K}",
                                   f"Trainer.num_env_workers={w}",
                                   f"Trainer.env_splits={splits}", "Trainer.num_actors=1",
                                   f"Trainer.unroll_length={T}",
                                   # the learner only publishes weights here
                                   f"PPOLearner.mini_batch_size={K * T}"] + args.gin_param)
    try:
        settings = TrainerSettings()
        observation, action_spec = read_env_spec(settings)
        learner = make_learner(settings, observation, action_spec)
        actor = Actor(0, settings, NeuralPolicy)
    finally:
        gin.clear_config()
    raw = None
    try:
        if getattr(learner, "normalize_observations", False):  # statistics to publish
            learner.normalizer.update(np.random.default_rng(0).standard_normal(
                (256, learner.normalizer.dim)))
        actor.load_weights(1, learner.weight_arrays())
        out = allocate_trajectory(T, K, observation, action_spec.dim,
                                  state_size=actor.state_size)
        raw = raw_env.RawSteppers(env_name, K, max(w, 1), seed=1)
        actor.unroll(out)  # warm-up: first steps, first calls
        raw.step(8)
        actor_s = raw_s = 0.0
        steps = raw_steps = episodes = 0
        inference_s = env_s = 0.0
        for _ in range(args.cycles):
            start = time.perf_counter()
            record = actor.unroll(out)
            actor_s += time.perf_counter() - start
            steps += K * T
            episodes += len(record.episodes)
            inference_s += record.inference_s
            env_s += record.env_s
            n, seconds = raw.step(T)
            raw_steps += n
            raw_s += seconds
    finally:
        if raw is not None:
            raw.close()
        actor.close()
    actor_rate, limit = steps / actor_s, raw_steps / raw_s
    logger.info("W=%d S=%d: actor %.0f steps/s, limit of %d process(es) %.0f -> %.3f "
                "(interleaved, %d cycles of %d steps)", w, splits, actor_rate, max(w, 1),
                limit, actor_rate / limit, args.cycles, T)
    return {"W": w, "splits": splits, "mode": "interleaved",
            "actor_steps_per_s": actor_rate, "limit_processes": max(w, 1),
            "limit_steps_per_s": limit, "limit_fraction": actor_rate / limit,
            "actor_inference_frac": inference_s / actor_s,
            "actor_env_wait_frac": env_s / actor_s,
            "actor_episodes_per_1k_steps": 1000.0 * episodes / steps,
            "cycles": args.cycles, "pass": actor_rate / limit >= args.target}


def run_one(args: argparse.Namespace, env_name: str, w: int, splits: int,
            raw_one_process: float, cores: int) -> Dict[str, Any]:
    K, T = args.num_envs, args.unroll_length
    params = [f"Trainer.env_name='{env_name}'", f"Trainer.num_envs={K}",
              f"Trainer.num_env_workers={w}", f"Trainer.env_splits={splits}",
              "Trainer.num_actors=1",
              "Trainer.backend='process'", f"Trainer.unroll_length={T}",
              f"Trainer.num_iterations={args.iterations}", "Trainer.num_env_steps=0",
              f"PPOLearner.num_epochs={args.num_epochs}",
              f"PPOLearner.mini_batch_size={min(4096, K * T)}"] + args.gin_param
    def measure_limit() -> float:
        return raw_env.measure_raw_env_processes(env_name, K, max(w, 1),
                                                  args.raw_unrolls * T, seed=1)["steps_per_s"]

    # The VM's speed drifts by 10-30% within minutes: the limit is measured
    # right before and right after the run, and their mean is the reference.
    limit_before = measure_limit()
    summary = benchlib.timing_run(args.gin_file, params, f"sampler_K{K}_W{w}_S{splits}",
                                  args.root_dir, args.keep, args.warmup, args.timeout_s)
    limit_after = measure_limit()
    limit = 0.5 * (limit_before + limit_after)
    steps = K * T
    actor_rate = steps / summary["U"]
    e2e_rate = steps / (summary["T"] - summary["L"])
    raw = raw_env.measure_raw_env(env_name, K, w, args.raw_unrolls * T, seed=1)
    efficiency = actor_rate / raw["steps_per_s"]
    machine_fraction = actor_rate / (cores * raw_one_process)
    logger.info("W=%d S=%d: actor %.0f steps/s, end-to-end %.0f, raw %.0f -> efficiency "
                "%.3f; limit of %d process(es) %.0f -> %.3f; %.3f of %d x %.0f", w, splits,
                actor_rate, e2e_rate, raw["steps_per_s"], efficiency, max(w, 1), limit,
                actor_rate / limit, machine_fraction, cores, raw_one_process)
    return {"W": w, "splits": splits, "actor_steps_per_s": actor_rate,
            "end_to_end_steps_per_s": e2e_rate,
            "limit_processes": max(w, 1), "limit_steps_per_s": limit,
            "limit_before_steps_per_s": limit_before, "limit_after_steps_per_s": limit_after,
            "limit_fraction": actor_rate / limit,
            "end_to_end_limit_fraction": e2e_rate / limit,
            "raw_steps_per_s": raw["steps_per_s"], "efficiency": efficiency,
            "end_to_end_efficiency": e2e_rate / raw["steps_per_s"],
            "machine_fraction": machine_fraction,
            "end_to_end_machine_fraction": e2e_rate / (cores * raw_one_process),
            "actor_inference_frac": summary["actor_inference_s"] / summary["U"],
            "actor_env_wait_frac": summary["actor_env_s"] / summary["U"],
            "actor_episodes_per_1k_steps": summary["episodes_per_1k_steps"],
            "raw_episodes_per_1k_steps": 1000.0 * raw["episodes"] / raw["env_steps"],
            "iterations_used": summary["iterations_used"],
            "pass": actor_rate / limit >= args.target}


def main(argv: List[str] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    env_name = env_name_of(args)
    cores = usable_cores()
    # SIGTERM (a paused bench) raises here, so the env and stepping processes
    # of a measurement are closed as on Ctrl-C.
    with children.sigterm_raises():
        raw_one = raw_env.measure_raw_env(env_name, args.num_envs, 0,
                                           args.raw_unrolls * args.unroll_length, seed=1)
        logger.info("raw, one process, K=%d: %.0f steps/s; %d cores", args.num_envs,
                    raw_one["steps_per_s"], cores)
        results = []
        for w in benchlib.parse_int_list(args.workers):
            for splits in benchlib.parse_int_list(args.splits):
                if w > args.num_envs or (w == 0 and splits > 1) \
                        or args.num_envs // max(w, 1) < splits:
                    continue
                if args.mode == "interleaved":
                    results.append(run_interleaved(args, env_name, w, splits))
                else:
                    results.append(run_one(args, env_name, w, splits,
                                           raw_one["steps_per_s"], cores))
    benchlib.emit({
        "bench": "sampler_efficiency", "env": env_name, "num_envs": args.num_envs,
        "unroll_length": args.unroll_length, "iterations": args.iterations,
        "warmup": args.warmup, "target": args.target, **benchlib.machine_info(),
        "cores": cores, "raw_one_process_steps_per_s": raw_one["steps_per_s"],
        "results": results, "pass": all(r["pass"] for r in results),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
