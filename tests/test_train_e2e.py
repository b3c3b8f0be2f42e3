"""The train command works end to end as a user runs it, and resumes.

Runs ``python -m alf_async.bin.train --gin_file=ppo_bullet_inverted_pendulum.gin
--root_dir=DIR --gin_param=...`` as a subprocess, from a directory outside the
project, with a tiny budget (3 iterations of 2 envs x 16 steps), and proves that:

- it exits 0 and the run directory holds ``config.gin`` (the run's bindings,
  including the command-line overrides), ``operative_config.gin`` (with defaults),
  ``metrics.jsonl`` with one line per iteration whose counters advance by
  num_envs * unroll_length and whose EPS == num_envs / T, a TensorBoard event
  file that really contains the scalar tags (read back with TensorBoard's
  ``EventAccumulator``, values equal to the metrics file's), and a checkpoint
  whose counters match;
- running again on the same ``--root_dir``, without ``--gin_file``, with a larger
  budget (``--gin_param=Trainer.num_iterations=5``) resumes from the saved config
  (the saved num_envs / unroll_length, not the library defaults) and continues
  the iteration and env-step counters (no restart from 0, strictly increasing);
- running with nothing but ``--root_dir`` reads the saved config (whose budget
  is now reached) and exits 0 without training further.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess

import pytest

from alf_async.checkpoint import load_checkpoint_file

NUM_ENVS, UNROLL = 2, 16
STEPS_PER_ITERATION = NUM_ENVS * UNROLL
SMALL = [
    f"--gin_param=Trainer.num_envs={NUM_ENVS}",
    f"--gin_param=Trainer.unroll_length={UNROLL}",
    "--gin_param=PPOLearner.mini_batch_size=16",
    "--gin_param=PPOLearner.num_epochs=1",
]


def _run(cmd, cwd):
    env = dict(os.environ)
    env.pop("ALF_ASYNC_CONFIG_PATH", None)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
        f"stderr:\n{proc.stderr}")
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _metrics(root):
    with open(os.path.join(root, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _scalars(root):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = glob.glob(os.path.join(root, "tensorboard", "**", "events.out.tfevents.*"),
                      recursive=True)
    assert files, "no TensorBoard event file under tensorboard/"
    result = {}
    for path in sorted(files):
        acc = EventAccumulator(path, size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            result.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return result


def _check_metrics(lines, iterations):
    assert [m["iteration"] for m in lines] == list(range(1, iterations + 1))
    assert [m["env_steps"] for m in lines] == [
        STEPS_PER_ITERATION * i for i in range(1, iterations + 1)]
    previous_wall = 0.0
    for m in lines:
        assert m["num_envs"] == NUM_ENVS and m["unroll_length"] == UNROLL
        assert m["T"] > 0
        assert m["EPS"] == pytest.approx(NUM_ENVS / m["T"], rel=1e-9)
        assert m["env_steps_per_s"] == pytest.approx(STEPS_PER_ITERATION / m["T"], rel=1e-9)
        assert m["wall_time"] >= previous_wall
        previous_wall = m["wall_time"]
        for key in ("policy_loss", "value_loss", "approx_kl", "clip_fraction", "lag"):
            assert key in m, key


def test_train_writes_run_directory_and_resumes(tmp_path, train_cmd):
    root = str(tmp_path / "run")
    first = train_cmd + ["--gin_file=ppo_bullet_inverted_pendulum.gin", f"--root_dir={root}",
                         "--gin_param=Trainer.num_iterations=3"] + SMALL
    proc = _run(first, cwd=str(tmp_path))

    # -- the run directory ----------------------------------------------------
    with open(os.path.join(root, "config.gin"), encoding="utf-8") as f:
        config = f.read()
    assert "Trainer.num_iterations = 3" in config
    assert f"Trainer.num_envs = {NUM_ENVS}" in config
    assert "InvertedPendulumBulletEnv-v0" in config
    with open(os.path.join(root, "operative_config.gin"), encoding="utf-8") as f:
        operative = f.read()
    assert "PPOLearner.mini_batch_size = 16" in operative
    assert "PPOLearner.adam_epsilon" in operative  # a default nobody set

    lines = _metrics(root)
    _check_metrics(lines, 3)
    # Start-up time: on the first row of the process only, and in the log.
    assert 0 < lines[0]["startup_s"] < 600
    assert [m["startup_s"] for m in lines[1:]] == [None, None]
    assert "start-up took" in proc.stderr

    scalars = _scalars(root)
    for tag in ("throughput/EPS", "throughput/T", "throughput/env_steps_per_s",
                "ppo/policy_loss", "ppo/value_loss", "async/lag"):
        assert tag in scalars, f"{tag} missing from TensorBoard (has {sorted(scalars)})"
    eps = sorted(scalars["throughput/EPS"])
    assert [step for step, _ in eps] == [m["env_steps"] for m in lines]
    for (_, value), m in zip(eps, lines):
        assert value == pytest.approx(m["EPS"], rel=1e-5)

    checkpoints = sorted(glob.glob(os.path.join(root, "checkpoints", "ckpt-*.pt")))
    assert checkpoints == [os.path.join(root, "checkpoints", "ckpt-3.pt")]
    state = load_checkpoint_file(checkpoints[0])
    assert state["counters"]["iteration"] == 3
    assert state["counters"]["env_steps"] == 3 * STEPS_PER_ITERATION
    assert state["learner"]["iteration"] == 3
    window = state["episode_window"]["returns"]
    assert window and lines[-1]["episode_return"] == pytest.approx(sum(window) / len(window))

    # -- resume with a larger budget, from the saved config (no --gin_file) ------
    second = train_cmd + [f"--root_dir={root}", "--gin_param=Trainer.num_iterations=5"]
    proc = _run(second, cwd=str(tmp_path))
    assert "resumed" in proc.stderr
    lines = _metrics(root)
    # 1..5 with env steps 32..160: continued, not restarted; and the saved
    # num_envs=2 / unroll_length=16 were used (the defaults are 8 / 128).
    _check_metrics(lines, 5)
    assert lines[3]["startup_s"] > 0 and lines[4]["startup_s"] is None  # the resumed process
    # The recent-returns window came back with the checkpoint: no 'return nan'
    # after a resume; the first resumed row averages old and new episodes.
    assert lines[3]["episode_return"] is not None
    # Sync with observation normalization: every batch, the first one after
    # the resume too, is normalized as it was acted and trained on-policy.
    assert [m["truncated_fraction"] for m in lines] == [0.0] * 5
    state = load_checkpoint_file(os.path.join(root, "checkpoints", "ckpt-5.pt"))
    assert state["counters"]["iteration"] == 5
    assert state["counters"]["env_steps"] == 5 * STEPS_PER_ITERATION
    assert state["learner"]["iteration"] == 5
    eps_steps = sorted(step for step, _ in _scalars(root)["throughput/EPS"])
    assert eps_steps == [m["env_steps"] for m in lines]
    with open(os.path.join(root, "config.gin"), encoding="utf-8") as f:
        config = f.read()
    assert "Trainer.num_iterations = 5" in config
    assert f"Trainer.unroll_length = {UNROLL}" in config

    # -- nothing but --root_dir: the saved config's budget is already reached ---
    proc = _run(train_cmd + [f"--root_dir={root}"], cwd=str(tmp_path))
    assert "budget already reached" in proc.stderr
    assert len(_metrics(root)) == 5
    assert sorted(os.listdir(os.path.join(root, "checkpoints")))[-1] == "ckpt-5.pt"
