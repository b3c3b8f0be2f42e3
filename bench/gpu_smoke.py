"""A GPU learner's smoke test and speed, in one short script.

A GPU machine is lent to some sessions for minutes: this is what to run on it
(and what CI runs on the CPU, ``--device cpu --tiny``). On ``--device``
("cuda" where this machine has a CUDA device, else "cpu"):

1. every policy kind trains ``--iterations`` iterations on synthetic batches:
   PPO with a Gaussian, a gSDE, a discrete, an image (uint8 frames) and an LSTM
   policy, SAC on vectors and on images. Per kind: the statistics are finite
   and the weights moved; the published weights (``weight_arrays``) equal the
   model's exactly, and a CPU policy loading them gives the model's values
   (or SAC's deterministic actions) to float rounding (``policy_max_abs_diff``);
   reads back to the host per gradient step (``host_reads_per_step``, counted
   on a GPU: each one waits for the device); the learner's checkpoint
   (written from the device) loads into a CPU learner with equal weights,
   which trains one more iteration (``cpu_resume``).
2. a run (unless ``--skip_run``): the train command trains the pendulum
   (``--run_gin_file``) for 2 iterations with ``PPOLearner.device`` = the
   device, then resumes it with ``CUDA_VISIBLE_DEVICES=""`` (a machine
   without a GPU) to 3 iterations: it must end with exit 0, and on a GPU log
   that it fell back to the CPU.
3. speed: the learners of the Pong (``ppo_atari_pong.gin``) and humanoid
   (``ppo_bullet_humanoid.gin``) configs train on synthetic batches of their
   configs' T x K, on the device and on the CPU: gradient steps/s of each,
   learner env steps/s (T * K per iteration) and device/CPU ratio
   (``--tiny`` shrinks the batches and epochs); on a CUDA device also the
   kernels launched and the GPU's busy time per gradient step (torch's
   profiler over one more iteration). ``--speed_gin_param`` adds bindings
   (``PPOLearner.precision='bf16'``) to both sides.

Output: one JSON line {"bench": "gpu_smoke", "device": ..., "ok": ...,
"kinds": {kind: {...}}, "run": {...}, "speed": {"pong": {...}, "humanoid":
{...}}}. ``ok`` is true when every check passed; the script exits 1 otherwise.

Full size (a GPU machine, about 1-3 minutes):  python -m bench.gpu_smoke
(``--run_gin_file ppo_cartpole.gin`` where pybullet is missing: it has no
wheel for Python 3.12)
Smoke run (CPU, about a minute):  python -m bench.gpu_smoke --device cpu --tiny --skip_run
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from bench import benchlib

logger = logging.getLogger("bench")

_READ_METHODS = ("item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__",
                 "__index__", "__array__")


class HostReads:
    """Counts reads of non-CPU tensors back to the host while active (a
    context manager): ``item``, ``float``, ``bool``, ``int``, ``tolist``,
    ``numpy``, ``cpu`` and ``to("cpu")``. On a GPU each waits for every
    kernel queued before it. Tensors on the "meta" device (tests) have no
    values: their reads are counted and answered with ones of their shape."""

    def __init__(self):
        self.count = 0
        self.where: List[str] = []  # the line of the library that read, per read
        self._saved: Dict[str, Any] = {}

    def __enter__(self) -> "HostReads":
        for name in _READ_METHODS:
            self._saved[name] = torch.Tensor.__dict__.get(name)
            setattr(torch.Tensor, name, self._wrap(name, getattr(torch.Tensor, name)))
        self._saved["to"] = torch.Tensor.__dict__.get("to")
        original_to = torch.Tensor.to
        reads = self

        def to(tensor, *args, **kwargs):
            if tensor.device.type != "cpu":
                device = torch._C._nn._parse_to(*args, **kwargs)[0]
                if device is not None and torch.device(device).type == "cpu":
                    return reads._read("to", tensor, lambda: original_to(tensor, *args,
                                                                          **kwargs))
            return original_to(tensor, *args, **kwargs)

        torch.Tensor.to = to
        return self

    def __exit__(self, *exc) -> None:
        for name, method in self._saved.items():
            if method is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, method)
        self._saved = {}

    def _read(self, name: str, tensor: torch.Tensor, real: Callable[[], Any]) -> Any:
        self.count += 1
        caller = traceback.extract_stack(limit=4)[0]
        self.where.append(f"{name} at {caller.filename}:{caller.lineno}")
        if tensor.device.type != "meta":
            return real()
        ones = torch.ones(tuple(tensor.shape), dtype=tensor.dtype)
        if name in ("item", "__float__", "__int__", "__index__", "__bool__"):
            value = ones.reshape(-1)[0].item()
            return {"__bool__": bool, "__int__": int, "__index__": int}.get(
                name, lambda x: x)(value)
        return {"tolist": ones.tolist, "numpy": ones.numpy,
                "__array__": ones.numpy}.get(name, lambda: ones)()

    def _wrap(self, name: str, method: Callable) -> Callable:
        reads = self

        def wrapper(tensor, *args, **kwargs):
            if tensor.device.type != "cpu":
                return reads._read(name, tensor, lambda: method(tensor, *args, **kwargs))
            return method(tensor, *args, **kwargs)

        return wrapper


def synthetic_ppo_batch(T: int, K: int, observation, action_spec, state_size: int = 0,
                        seed: int = 0) -> Dict[str, np.ndarray]:
    """A random [T, K] trajectory batch as an actor hands it over
    (``PPOLearner.train``): observations of the spec's shape and dtype,
    actions of the action spec (choice indices for discrete kinds), episode
    ends, and for a recurrent network the episode starts and start states [K, S]."""
    rng = np.random.default_rng(seed)
    shape = (T, K) + tuple(observation.shape)
    obs = (rng.integers(0, 256, shape).astype(np.uint8) if observation.dtype == "uint8"
           else rng.standard_normal(shape).astype(np.float32))
    if action_spec.discrete:
        action = np.stack([rng.integers(0, n, (T, K)) for n in action_spec.nvec],
                          axis=-1).astype(np.float32)
    else:
        action = rng.uniform(-1, 1, (T, K, action_spec.dim)).astype(np.float32)
    batch = {"observation": obs, "action": action,
             "reward": rng.standard_normal((T, K)).astype(np.float32),
             "terminated": rng.random((T, K)) < 0.05, "truncated": rng.random((T, K)) < 0.02,
             "log_prob": (-rng.random((T, K)) * 2).astype(np.float32),
             "value": rng.standard_normal((T, K)).astype(np.float32),
             "truncation_value": np.zeros((T, K), np.float32),
             "bootstrap_value": np.zeros(K, np.float32)}
    if state_size:
        ends = batch["terminated"] | batch["truncated"]
        batch["episode_start"] = np.concatenate([np.zeros((1, K), bool), ends[:-1]])
        batch["initial_state"] = np.zeros((K, state_size), np.float32)
    return batch


def synthetic_sac_batch(B: int, observation, action_dim: int,
                        seed: int = 0) -> Dict[str, np.ndarray]:
    """B random transitions as ``ReplayBuffer.sample`` gives them."""
    rng = np.random.default_rng(seed)
    shape = (B,) + tuple(observation.shape)

    def obs() -> np.ndarray:
        return (rng.integers(0, 256, shape).astype(np.uint8) if observation.dtype == "uint8"
                else rng.standard_normal(shape).astype(np.float32))

    return {"observation": obs(), "next_observation": obs(),
            "action": rng.uniform(-1, 1, (B, action_dim)).astype(np.float32),
            "reward": rng.standard_normal(B).astype(np.float32),
            "terminated": rng.random(B) < 0.05}


# -- 1. every policy kind ---------------------------------------------------------
def kinds(tiny: bool) -> Dict[str, Dict[str, Any]]:
    """kind -> algorithm, observation, action spec, gin bindings, learner kwargs."""
    from alf_async.envs.spaces import ActionSpec, ObservationSpec

    vector = ObservationSpec((8,), "float32")
    frames = (ObservationSpec((12, 12, 1), "uint8") if tiny
              else ObservationSpec((4, 84, 84), "uint8"))
    small_net = ("ActorNetwork.hidden_sizes = (16, 16)\nValueNetwork.hidden_sizes = (16, 16)\n"
                 "SquashedGaussianActor.hidden_sizes = (16, 16)\n"
                 "TwinQNetwork.hidden_sizes = (16, 16)\n" if tiny else "")
    image = "ImageEncoder.architecture = 'small'\n" if tiny else ""
    continuous = ActionSpec.continuous(2)
    return {
        "ppo_gaussian": dict(algorithm="ppo", observation=vector, action=continuous,
                             bindings=small_net),
        "ppo_gsde": dict(algorithm="ppo", observation=vector, action=continuous,
                         bindings=small_net + "ActorNetwork.exploration = 'state_dependent'"),
        "ppo_discrete": dict(algorithm="ppo", observation=vector,
                             action=ActionSpec("multi_discrete", 2, (3, 4), (0, 0)),
                             bindings=small_net),
        "ppo_image": dict(algorithm="ppo", observation=frames,
                          action=ActionSpec("discrete", 1, (6,), (0,)), bindings=image),
        "ppo_lstm": dict(algorithm="ppo", observation=vector, action=continuous,
                         bindings=small_net + "ActorCritic.rnn = 'lstm'\n"
                                              "ActorCritic.rnn_size = 16",
                         kwargs=dict(chunk_length=4)),
        "sac_vector": dict(algorithm="sac", observation=vector, action=continuous,
                           bindings=small_net),
        "sac_image": dict(algorithm="sac", observation=frames, action=continuous,
                          bindings=small_net + image),
    }


def _make_learner(spec: Dict[str, Any], device: str, sizes: Dict[str, int], seed: int = 0):
    from alf_async.algorithms.ppo_learner import PPOLearner
    from alf_async.algorithms.sac_learner import SACLearner

    if spec["algorithm"] == "sac":
        return SACLearner(spec["observation"], spec["action"], batch_size=sizes["batch"],
                          device=device, seed=seed)
    return PPOLearner(spec["observation"], spec["action"], num_epochs=sizes["epochs"],
                      mini_batch_size=sizes["mini_batch"], device=device, seed=seed,
                      **spec.get("kwargs", {}))


def _networks(learner) -> Dict[str, torch.Tensor]:
    if hasattr(learner, "model"):
        return learner.model.state_dict()
    return {**{f"actor.{k}": v for k, v in learner.actor.state_dict().items()},
            **{f"critic.{k}": v for k, v in learner.critic.state_dict().items()}}


def _train(learner, spec: Dict[str, Any], sizes: Dict[str, int], iterations: int,
           seed: int) -> Tuple[List[Dict[str, float]], int]:
    """``iterations`` PPO iterations or ``iterations`` x 4 SAC steps; returns
    (statistics of each, gradient steps taken)."""
    out, steps = [], 0
    for i in range(iterations):
        if spec["algorithm"] == "sac":
            batch = synthetic_sac_batch(sizes["batch"], spec["observation"],
                                        spec["action"].dim, seed + i)
            for _ in range(4):
                out.append(learner.train_step(batch))
                steps += 1
        else:
            batch = synthetic_ppo_batch(sizes["T"], sizes["K"], spec["observation"],
                                        spec["action"], learner.state_size, seed + i)
            stats = learner.train(batch, progress=i / max(iterations, 1))
            out.append(stats)
            steps += int(stats["gradient_steps"])
    return out, steps


def _policy_difference(learner, spec: Dict[str, Any]) -> float:
    """Max |difference| between the CPU policy built from the published
    weights and the learner's model on the same observations: PPO's values,
    SAC's deterministic actions."""
    from alf_async.algorithms.policy import NeuralPolicy
    from alf_async.algorithms.sac_policy import SACPolicy
    from alf_async.utils.devices import to_device

    arrays = learner.weight_arrays()
    if spec["algorithm"] == "sac":
        obs = synthetic_sac_batch(8, spec["observation"], spec["action"].dim, 99)["observation"]
        policy = SACPolicy(spec["observation"], spec["action"], deterministic=True)
        policy.load_weights(arrays)
        policy.uniform = False
        ours = policy.act(obs)[0]
        with torch.no_grad():
            theirs = learner.actor.sample(to_device(obs, learner.device), None,
                                          deterministic=True)[0].cpu().numpy()
        return float(np.abs(ours - theirs).max())
    policy = NeuralPolicy(spec["observation"], spec["action"], deterministic=True)
    policy.load_weights(arrays)
    obs = synthetic_ppo_batch(1, 8, spec["observation"], spec["action"], seed=99)["observation"][0]
    state = np.zeros((8, learner.state_size), np.float32) if learner.state_size else None
    ours = policy.value(obs, state)
    with torch.no_grad():
        x = to_device(obs, learner.device)
        if learner.normalize_observations:
            x = learner.normalizer.normalize(x.float())
        s = None if state is None else to_device(state, learner.device)
        theirs = learner.model.predict_value(x, s).cpu().numpy()
    return float(np.abs(ours - theirs).max())


def check_kind(name: str, spec: Dict[str, Any], device: str, sizes: Dict[str, int],
               iterations: int) -> Dict[str, Any]:
    """Train one policy kind on ``device`` and check what it publishes and
    checkpoints (see the module doc); {"ok": False, "error": ...} on a failure."""
    import gin

    from alf_async.checkpoint import Checkpointer
    from alf_async.runtime.weight_store import unpack_weights

    from alf_async.config import register_configurables

    start = time.monotonic()
    try:
        register_configurables()
        gin.clear_config()
        gin.parse_config(spec["bindings"])
        learner = _make_learner(spec, device, sizes)
        before = {k: v.detach().cpu().clone() for k, v in _networks(learner).items()}
        _train(learner, spec, sizes, 1, seed=100)  # warm-up (kernels, allocator)
        with HostReads() as reads:
            stats, steps = _train(learner, spec, sizes, iterations, seed=0)
        finite = all(math.isfinite(v) for s in stats for k, v in s.items()
                     if k != "explained_variance")
        moved = any(not torch.equal(before[k], v.detach().cpu())
                    for k, v in _networks(learner).items())
        published = unpack_weights(learner.weight_arrays())["param"]
        model = learner.model.state_dict() if hasattr(learner, "model") \
            else learner.actor.state_dict()
        weights_equal = (set(published) == set(model) and all(
            np.array_equal(published[k], v.detach().cpu().numpy()) for k, v in model.items()))
        difference = _policy_difference(learner, spec)
        with tempfile.TemporaryDirectory(prefix="alf_async_gpu_smoke_") as tmp:
            Checkpointer(tmp).save({"learner": learner.state_dict()}, 1)
            state, _ = Checkpointer(tmp).load_latest()
            on_cpu = _make_learner(spec, "cpu", sizes, seed=1)
            on_cpu.load_state_dict(state["learner"])
        resumed_equal = all(torch.equal(v.detach().cpu(), _networks(on_cpu)[k])
                            for k, v in _networks(learner).items())
        more, _ = _train(on_cpu, spec, sizes, 1, seed=7)
        cpu_resume = resumed_equal and all(math.isfinite(v) for s in more
                                           for k, v in s.items() if k != "explained_variance")
        on_device = torch.device(device).type != "cpu"
        reads_per_step = reads.count / steps if steps and on_device else None
        # PPO: one read per gradient step and one per iteration; SAC: one per step
        budget = steps + (iterations if spec["algorithm"] == "ppo" else 0)
        result = {"gradient_steps": steps, "finite": finite, "weights_moved": moved,
                  "published_weights_equal": weights_equal,
                  "policy_max_abs_diff": difference, "cpu_resume": cpu_resume,
                  "host_reads_per_step": reads_per_step,
                  "host_reads_within_budget": reads.count <= budget if on_device else None,
                  "seconds": time.monotonic() - start}
        if on_device and reads.count > budget:
            logger.warning("%s read back from the device %d times in %d gradient steps:\n%s",
                           name, reads.count, steps, "\n".join(reads.where[:40]))
        result["ok"] = bool(finite and moved and weights_equal and cpu_resume
                            and difference < 1e-3 and (not on_device or reads.count <= budget))
        return result
    except Exception as e:  # noqa: BLE001  (reported in the JSON line, exit 1)
        logger.error("%s failed:\n%s", name, traceback.format_exc())
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}
    finally:
        gin.clear_config()


# -- 2. a run trained on the device, resumed without a GPU ----------------------------------
def check_run(device: str, keep: bool, gin_file: str = "ppo_bullet_inverted_pendulum.gin"
              ) -> Dict[str, Any]:
    """The train command on ``gin_file`` (the PyBullet pendulum by default) with
    the learner on ``device``, then resumed as on a machine without a GPU
    (CUDA_VISIBLE_DEVICES="")."""
    params = ["Trainer.num_envs=2", "Trainer.unroll_length=32", "Trainer.num_env_steps=0",
              "Trainer.num_iterations=2", "Trainer.backend='inprocess'",
              "PPOLearner.mini_batch_size=32", "PPOLearner.num_epochs=1",
              "MetricsRecorder.tensorboard=False", f"PPOLearner.device='{device}'"]
    run = benchlib.RunDir(None, "gpu_run", keep)
    try:
        first = benchlib.run_train([gin_file], params, run.path,
                                   timeout_s=300, poll_s=0.5)
        hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        try:
            second = benchlib.run_train([], ["Trainer.num_iterations=3"], run.path,
                                        timeout_s=300, poll_s=0.5)
        finally:
            if hidden is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = hidden
        rows = benchlib.read_metrics(os.path.join(run.path, "metrics.jsonl"))
        log_path = os.path.join(run.path, "log.txt")
        log = open(log_path, encoding="utf-8").read() if os.path.isfile(log_path) else ""
    finally:
        run.cleanup()
    fell_back = "trains on the CPU" in log
    expect_fallback = torch.device(device).type != "cpu"
    result = {"trained_exit": first["returncode"], "resumed_exit": second["returncode"],
              "iterations": rows[-1]["iteration"] if rows else 0,
              "fallback_logged": fell_back}
    result["ok"] = (first["returncode"] == 0 and second["returncode"] == 0
                    and result["iterations"] == 3 and fell_back == expect_fallback)
    return result


# -- 3. learner speed on the device against the CPU ------------------------------------------
SPEED_CONFIGS = {"pong": "ppo_atari_pong.gin", "humanoid": "ppo_bullet_humanoid.gin"}


def _speed_spec(name: str):
    from alf_async.envs.spaces import ActionSpec, ObservationSpec

    if name == "pong":  # ALE/Pong-v5 as envs.atari gives it: 4 stacked 84x84 frames
        return ObservationSpec((4, 84, 84), "uint8"), ActionSpec("discrete", 1, (6,), (0,))
    return ObservationSpec((44,), "float32"), ActionSpec.continuous(17)  # HumanoidBullet


def kernel_profile(learner, batch: Dict[str, np.ndarray]) -> Dict[str, float]:
    """One training iteration of ``learner`` (on a CUDA device) under torch's
    profiler: GPU kernels launched per gradient step and the GPU's busy time
    per step (ms, the kernels' own time summed). Busy time well under the
    step's wall time means the step is bound by the host's launches, not by
    the GPU's arithmetic."""
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(learner.device)
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        steps = int(learner.train(batch, progress=0.0)["gradient_steps"])
        torch.cuda.synchronize(device)
    events = prof.key_averages()
    on_gpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    return {"kernels_per_step": sum(e.count for e in on_gpu) / steps,
            "gpu_busy_ms_per_step": sum(e.self_device_time_total for e in events)
            / 1e3 / steps}


def learner_speed(name: str, device: str, tiny: bool, iterations: int,
                  budget_s: float, gin_params: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """Gradient steps/s of ``name``'s learner (its gin file's networks and
    PPO settings, ``gin_params`` after them, a synthetic batch of its T x K)
    on ``device``."""
    import gin

    from alf_async.algorithms.ppo_learner import PPOLearner
    from alf_async.config import parse_config

    shrink = (["Trainer.unroll_length=16", "Trainer.num_envs=4",
               "PPOLearner.mini_batch_size=32", "PPOLearner.num_epochs=1"] if tiny else [])
    parse_config([SPEED_CONFIGS[name]], shrink + list(gin_params))
    try:
        T, K = gin.query_parameter("Trainer.unroll_length"), gin.query_parameter(
            "Trainer.num_envs")
        observation, action = _speed_spec(name)
        learner = PPOLearner(observation, action, device=device)
        batch = synthetic_ppo_batch(T, K, observation, action)
        learner.train(batch)  # warm-up
        steps, start, done = 0, time.perf_counter(), 0
        while done < iterations and (done == 0 or time.perf_counter() - start < budget_s):
            steps += int(learner.train(batch, progress=0.0)["gradient_steps"])
            done += 1
        seconds = time.perf_counter() - start
        result = {"T": T, "K": K, "iterations": done, "gradient_steps_per_s": steps / seconds,
                  "ms_per_step": 1e3 * seconds / steps, "s_per_iteration": seconds / done,
                  "learner_env_steps_per_s": T * K * done / seconds}
        if torch.device(device).type == "cuda":
            result.update(kernel_profile(learner, batch))
    finally:
        gin.clear_config()
    return result


def compare_speed(device: str, tiny: bool, iterations: int, budget_s: float,
                  gin_params: Tuple[str, ...] = ()) -> Dict[str, Dict[str, Any]]:
    out = {}
    for name in SPEED_CONFIGS:
        on_device = learner_speed(name, device, tiny, iterations, budget_s, gin_params)
        on_cpu = (on_device if torch.device(device).type == "cpu"
                  else learner_speed(name, "cpu", tiny, iterations, budget_s, gin_params))
        out[name] = {"device": on_device, "cpu": on_cpu,
                     "device_over_cpu": on_device["gradient_steps_per_s"]
                     / on_cpu["gradient_steps_per_s"]}
        logger.info("%s learner: %.1f gradient steps/s on %s, %.1f on the CPU (x%.2f)", name,
                    on_device["gradient_steps_per_s"], device, on_cpu["gradient_steps_per_s"],
                    out[name]["device_over_cpu"])
    return out


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None,
                   help="the learner's device (default: cuda where there is one, else cpu)")
    p.add_argument("--tiny", action="store_true",
                   help="small networks, frames and batches (CI on the CPU)")
    p.add_argument("--iterations", type=int, default=3,
                   help="training iterations per policy kind (after one warm-up)")
    p.add_argument("--kinds", default=None,
                   help="comma-separated policy kinds to check (default: all)")
    p.add_argument("--skip_run", action="store_true",
                   help="skip the train-command run and its resume without a GPU")
    p.add_argument("--run_gin_file", default="ppo_bullet_inverted_pendulum.gin",
                   help="the gin file of the train-command run (ppo_cartpole.gin where "
                        "pybullet is not installed)")
    p.add_argument("--skip_speed", action="store_true",
                   help="skip the Pong and humanoid learner speeds")
    p.add_argument("--speed_iterations", type=int, default=3,
                   help="timed learner iterations per config and device (after a warm-up)")
    p.add_argument("--speed_budget_s", type=float, default=60.0,
                   help="stop timing a learner after this many seconds (at least one "
                        "iteration)")
    p.add_argument("--speed_gin_param", action="append", default=[],
                   help="a gin binding for the speed section's learners, on the device "
                        "and the CPU alike (repeatable), e.g. "
                        "\"PPOLearner.precision='bf16'\"")
    p.add_argument("--keep", action="store_true", help="keep the run's directory")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    benchlib.claim_stdout()
    benchlib.setup_logging()
    args = parse_args(argv)
    from alf_async.utils.devices import resolve_device

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    resolve_device("PPOLearner", device)  # a ConfigError names what this machine has
    torch.set_num_threads(os.cpu_count() or 1)  # the CPU learner at its best
    sizes = (dict(T=8, K=4, epochs=1, mini_batch=16, batch=16) if args.tiny
             else dict(T=64, K=8, epochs=2, mini_batch=128, batch=256))
    selected = kinds(args.tiny)
    if args.kinds:
        selected = {k: selected[k] for k in args.kinds.split(",")}
    results: Dict[str, Any] = {"bench": "gpu_smoke", "device": device, "tiny": args.tiny,
                               "torch": torch.__version__,
                               "cpu_threads": torch.get_num_threads(),
                               "gpu": (torch.cuda.get_device_name(torch.device(device))
                                       if torch.device(device).type == "cuda" else None)}
    results["kinds"] = {}
    for name, spec in selected.items():
        results["kinds"][name] = check_kind(name, spec, device, sizes, args.iterations)
        logger.info("%s: %s", name, results["kinds"][name])
    ok = all(r["ok"] for r in results["kinds"].values())
    if not args.skip_run:
        results["run"] = check_run(device, args.keep, args.run_gin_file)
        logger.info("run: %s", results["run"])
        ok = ok and results["run"]["ok"]
    if not args.skip_speed:
        results["speed"] = compare_speed(device, args.tiny, args.speed_iterations,
                                         args.speed_budget_s, tuple(args.speed_gin_param))
        results["speed_gin_params"] = args.speed_gin_param
    results["ok"] = ok
    results.update(benchlib.machine_info())
    benchlib.emit(results)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
