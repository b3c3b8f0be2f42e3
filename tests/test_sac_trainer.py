"""The off-policy Trainer: SAC through a replay buffer, held to a step ratio.

Runs real actor processes (the process backend) on tiny envs
(``sac_test_envs``): a fast one, where sampling outruns training, and one whose
steps sleep, where training outruns sampling. The conftest's ``no_leaks``
fixture checks that no process or shared-memory block (slots, weights, the
replay buffer) is left behind.
"""

from __future__ import annotations

import math
import os

import gin
import pytest
import torch

from alf_async.checkpoint import load_checkpoint_file
from alf_async.training.trainer import Trainer
from alf_async.settings import ReplaySettings, TrainerSettings
from alf_async.utils.validation import ConfigError
from reliability_helpers import checkpoint_files, read_metrics

FAST_ENV = "sac_test_envs:AlfAsyncPointMass-v0"
SLOW_ENV = "sac_test_envs:AlfAsyncSlowPointMass-v0"


@pytest.fixture(autouse=True)
def small_sac():
    gin.clear_config()
    for name, value in (("SquashedGaussianActor.hidden_sizes", (32, 32)),
                        ("TwinQNetwork.hidden_sizes", (32, 32)),
                        ("SACLearner.batch_size", 32),
                        ("MetricsRecorder.tensorboard", False),
                        ("MetricsRecorder.console_interval_s", 0)):
        gin.bind_parameter(name, value)
    yield
    gin.clear_config()


def settings(env: str = FAST_ENV, **overrides) -> TrainerSettings:
    # W = 0 as the tests' process counts assume (no "auto": its env probe would
    # step the exiting env once before the actors do).
    base = dict(algorithm="sac", env_name=env, num_envs=4, unroll_length=4, num_actors=2,
                num_env_workers=0, env_splits=1, num_env_steps=1600,
                checkpoint_interval=10_000, actor_timeout_s=60.0)
    base.update(overrides)
    return TrainerSettings(**base)


def train(root, s: TrainerSettings, replay: ReplaySettings) -> Trainer:
    trainer = Trainer(str(root), s, replay=replay)
    trainer.train()
    return trainer


@pytest.mark.parametrize("env, ratio, learner_waits", [
    (FAST_ENV, 0.5, False),  # sampling far faster: the actors are held back
    (SLOW_ENV, 4.0, True),   # training far faster: the learner waits for data
])
def test_the_ratio_holds_whichever_side_is_faster(tmp_path, env, ratio, learner_waits):
    replay = ReplaySettings(capacity=10_000, learning_starts=100,
                            env_steps_per_gradient_step=ratio, publish_interval=4)
    s = settings(env, num_env_steps=1200 if env == FAST_ENV else 1600)
    trainer = train(tmp_path / "run", s, replay)
    env_steps, grads = trainer.counters["env_steps"], trainer.learner.gradient_steps
    achieved = (env_steps - replay.learning_starts) / grads
    assert abs(achieved / ratio - 1) < 0.05, (env_steps, grads)
    rows = read_metrics(str(tmp_path / "run"))
    # Along the way: the learner is never ahead of what the env steps paid for,
    # and the actors never more than the lead (2 batches per actor) ahead of it.
    lead = replay.lead(s.num_actors, s.steps_per_batch, s.slots_per_actor)
    deficits = [(r["env_steps"] - replay.learning_starts) - ratio * r["gradient_steps_total"]
                for r in rows if r["env_steps"] >= replay.learning_starts]
    assert deficits and min(deficits) >= 0 and max(deficits) <= lead, (min(deficits),
                                                                     max(deficits))
    learner_waited = sum(r["learner_throttled_s"] for r in rows)
    actors_waited = sum(r["actors_throttled_s"] for r in rows)
    assert (learner_waited > actors_waited) == learner_waits, (learner_waited, actors_waited)
    last = rows[-1]
    assert last["buffer_fill"] == pytest.approx(min(1.0, env_steps / replay.capacity))
    assert math.isfinite(last["critic_loss"]) and last["alpha"] > 0
    assert last["data_age"] >= 0 and {r["actor_id"] for r in rows} == {0, 1}


@pytest.mark.parametrize("ratio, backend", [(1.0, "process"), (1.5, "process"),
                                            (1.5, "inprocess")])
def test_strict_single_actor_is_the_sync_loop(tmp_path, ratio, backend):
    """N = 1, strict: batch i is collected with the weights after all gradient
    steps that batches < i paid for, and its row counts exactly those steps."""
    b, starts = 16, 32
    replay = ReplaySettings(capacity=5_000, learning_starts=starts, strict=True,
                            env_steps_per_gradient_step=ratio, publish_interval=3)
    trainer = train(tmp_path / "run", settings(num_actors=1, num_env_steps=480,
                                               backend=backend), replay)
    rows = read_metrics(str(tmp_path / "run"))

    # The hand-written sync loop: collect b steps, then take what they paid for.
    def earned(env_steps):
        return 0 if env_steps < starts else math.floor((env_steps - starts) / ratio)

    expected_steps, expected_version, grads = [], [], 0
    for i in range(1, len(rows) + 1):
        expected_version.append(grads)              # weights the batch was acted with
        expected_steps.append(grads - (expected_version[-2] if i > 1 else 0))
        grads = earned(i * b)                       # the learner pays for batch i
    assert [r["behaviour_version"] for r in rows] == expected_version
    assert [r["gradient_steps"] for r in rows] == expected_steps
    assert all(r["lag"] == 0 for r in rows)
    assert trainer.learner.gradient_steps == earned(480)


def test_resume_with_and_without_the_replay_buffer(tmp_path):
    replay = ReplaySettings(capacity=5_000, learning_starts=64)
    root = tmp_path / "run"
    first = train(root, settings(num_actors=1, num_env_steps=320), replay)
    g0 = first.learner.gradient_steps
    state = load_checkpoint_file(checkpoint_files(str(root))[-1])
    saved = state["replay_buffer"]
    assert len(saved["reward"]) == 320 and saved["observation"].dtype == torch.float32
    assert state["learner"]["gradient_steps"] == g0

    second = train(root, settings(num_actors=1, num_env_steps=480), replay)
    rows = [r for r in read_metrics(str(root)) if r["env_steps"] > 320]
    assert rows[0]["buffer_fill"] == pytest.approx((320 + 16) / 5_000)  # restored
    assert rows[0]["gradient_steps_total"] >= g0
    assert second.learner.gradient_steps == math.floor(480 - 64)  # the ratio continued

    # Without the buffer the checkpoint is small and the resumed run refills it.
    lean = ReplaySettings(capacity=5_000, learning_starts=64, save_replay_buffer=False)
    root2 = tmp_path / "lean"
    train(root2, settings(num_actors=1, num_env_steps=320), lean)
    assert "replay_buffer" not in load_checkpoint_file(checkpoint_files(str(root2))[-1])
    resumed = train(root2, settings(num_actors=1, num_env_steps=480), lean)
    rows = [r for r in read_metrics(str(root2)) if r["env_steps"] > 320]
    assert rows[0]["buffer_fill"] == pytest.approx(16 / 5_000)
    refilling = [r for r in rows if r["env_steps"] < 320 + 64]
    assert refilling and all(r["gradient_steps"] == 0 for r in refilling[1:])
    assert resumed.learner.gradient_steps == g0 + (480 - 320 - 64)


def test_a_dead_actor_is_restarted_and_the_ratio_still_holds(tmp_path, monkeypatch):
    """An actor process exits at its envs' 100th step (W = 0: the envs step in
    the actor); the pool restarts it, the off-policy loop recounts the slots in
    flight, and the run ends on the ratio."""
    monkeypatch.setenv("ALF_ASYNC_TEST_EXIT_ONCE", str(tmp_path / "exited"))
    replay = ReplaySettings(capacity=5_000, learning_starts=64)
    # Two slots per actor: the dying actor may have a batch held back here
    # while it unrolls into its other slot.
    s = settings("sac_test_envs:AlfAsyncExitingPointMass-v0", num_env_steps=1600,
                 max_actor_restarts=2, slots_per_actor=2, num_actors=2)
    trainer = train(tmp_path / "run", s, replay)
    assert (tmp_path / "exited").exists()
    assert trainer.loop.batches.pool.stats().restarts == 1
    env_steps, grads = trainer.counters["env_steps"], trainer.learner.gradient_steps
    assert env_steps >= 1600 and grads == env_steps - 64
    rows = read_metrics(str(tmp_path / "run"))
    assert rows[-1]["actor_restarts"] == 1


def test_impossible_replay_settings_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="Replay.capacity"):
        ReplaySettings(capacity=0)
    with pytest.raises(ConfigError, match="Replay.env_steps_per_gradient_step"):
        ReplaySettings(env_steps_per_gradient_step=0.0)
    with pytest.raises(ConfigError, match=r"replay buffer would need .* Replay.max_replay"):
        Trainer(str(tmp_path / "run"), settings(),
                replay=ReplaySettings(capacity=10 ** 9, max_replay_memory_gb=1.0))
    with pytest.raises(ConfigError, match="continuous"):
        Trainer(str(tmp_path / "run2"), settings(env_name="CartPole-v1"),
                replay=ReplaySettings())


def test_the_async_sac_config_trains_logs_and_plays_from_the_command(tmp_path, train_cmd):
    """The shipped async SAC gin file, shrunk: the train command with two actor
    processes, TensorBoard curves of the SAC and replay metrics, a checkpoint
    the play command acts from (with gSDE and the time feature, which the play
    command must add to its env for the policy's input to fit)."""
    import subprocess
    import sys

    from conftest import REPO_ROOT

    root = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run(
        train_cmd + ["--gin_file=async_sac_bullet_half_cheetah.gin", f"--root_dir={root}",
                     f"--gin_param=Trainer.env_name='{FAST_ENV}'",
                     "--gin_param=Trainer.num_env_steps=640",
                     "--gin_param=Replay.learning_starts=128",
                     "--gin_param=SquashedGaussianActor.hidden_sizes=(32, 32)",
                     "--gin_param=TwinQNetwork.hidden_sizes=(32, 32)",
                     "--gin_param=SACLearner.batch_size=32",
                     # gSDE and the time feature, as the zoo runs SAC on PyBullet
                     "--gin_param=SquashedGaussianActor.use_sde=True",
                     "--gin_param=Trainer.time_feature=True"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(str(root))
    assert rows[-1]["env_steps"] == 640 and {r["actor_id"] for r in rows} == {0, 1}
    assert "env steps per gradient step: 1.000 (target 1)" in result.stderr
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(root / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"sac/critic_loss", "sac/alpha", "replay/ratio_overall",
            "replay/buffer_fill", "throughput/EPS"} <= tags, sorted(tags)
    played = subprocess.run(
        [sys.executable, "-m", "alf_async.bin.play", f"--root_dir={root}",
         "--num_episodes=1"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=120)
    assert played.returncode == 0, played.stderr[-2000:]
    assert "episode 1: return" in played.stdout


def test_a_polling_learner_gets_a_batch_that_has_arrived(tmp_path):
    """next_batch(timeout=0) reads the actors' messages before giving up, so a
    learner busy with gradient steps still takes finished batches."""
    import time

    from alf_async.runtime.process_pool import ProcessActorPool
    from scripted_policy import ScriptedPolicy
    from test_runtime_equivalence import ACT_DIM, OBS_DIM, make_config, weights

    config = make_config(0, num_actors=1)
    pool = ProcessActorPool(config, ScriptedPolicy, weights(0), OBS_DIM, ACT_DIM)
    try:
        pool.publish_weights(weights(0), 0)
        pool.start()
        # Polled with timeout=0 only, as a learner between gradient steps does:
        # with a next_batch that did not read the pipe at timeout 0, no batch
        # would ever come.
        got, deadline = None, time.monotonic() + 60.0
        while got is None and time.monotonic() < deadline:
            got = pool.next_batch(timeout=0.0)
            if got is None:
                time.sleep(0.01)
        assert got is not None and got[0].actor_id == 0
        pool.release(got[0])
    finally:
        pool.close()


def test_the_final_checkpoint_holds_the_last_batch_gradient_steps(tmp_path):
    """The last iteration is a checkpoint iteration (10 of 10): its periodic
    checkpoint is written before the batch's gradient steps, so the final one
    is written again with them."""
    replay = ReplaySettings(capacity=5_000, learning_starts=32, strict=True)
    trainer = train(tmp_path / "run", settings(num_actors=1, num_env_steps=160,
                                               checkpoint_interval=10), replay)
    path = checkpoint_files(str(tmp_path / "run"))[-1]
    assert path.endswith("ckpt-10.pt")
    assert load_checkpoint_file(path)["learner"]["gradient_steps"] == \
        trainer.learner.gradient_steps == 160 - 32
