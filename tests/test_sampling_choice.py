"""``Trainer.num_env_workers`` and ``Trainer.env_splits`` = "auto": the rule of
``sampling_choice.py`` gives valid values for 1, 2 and 16 cores (the cores are
mocked), explicit numbers are kept, and the choice is logged at start."""

from __future__ import annotations

import re

import pytest

import alf_async.settings as settings_module
from alf_async.sampling_choice import choose_sampling
from alf_async.settings import TrainerSettings
from alf_async.utils.validation import ConfigError

ENV = "InvertedPendulumBulletEnv-v0"


def resolved(monkeypatch, cores: int, **fields) -> TrainerSettings:
    monkeypatch.setattr(settings_module, "usable_cores", lambda: cores)
    return TrainerSettings(env_name=ENV, num_iterations=1, **fields)


# (cores, N, K, runtime) -> (W, S)
CASES = [
    (1, 1, 16, "actor_learner", (0, 1)),  # one core: the actor steps its envs itself
    (1, 2, 16, "actor_learner", (0, 1)),
    (2, 1, 16, "actor_learner", (2, 2)),  # sync on this machine: 2 workers, 2 splits
    (2, 1, 3, "actor_learner", (1, 2)),   # K // 2 = 1 worker with 3 envs
    (2, 1, 1, "actor_learner", (0, 1)),   # one env: nothing to split
    (2, 2, 16, "actor_learner", (0, 1)),  # async: the learner needs the second core
    (2, 2, 16, "hogwild", (0, 1)),
    (16, 1, 16, "actor_learner", (8, 2)),  # >= 2 envs per worker
    (16, 1, 96, "actor_learner", (16, 2)),
    (16, 2, 96, "actor_learner", (7, 2)),  # (16 - 1) // 2 cores per actor
    (16, 4, 8, "hogwild", (4, 2)),
    (16, 16, 8, "actor_learner", (0, 1)),
]


@pytest.mark.parametrize("cores,expected", [(1, (0, 1)), (2, (0, 1)), (16, (8, 2))])
def test_sac_leaves_the_learner_a_core(monkeypatch, cores, expected):
    s = resolved(monkeypatch, cores, algorithm="sac", num_envs=16)
    assert (s.num_env_workers, s.env_splits) == expected


@pytest.mark.parametrize("cores,num_actors,num_envs,runtime,expected", CASES)
def test_auto_follows_the_documented_rule(monkeypatch, cores, num_actors, num_envs, runtime,
                                          expected):
    s = resolved(monkeypatch, cores, num_actors=num_actors, num_envs=num_envs, runtime=runtime)
    assert (s.num_env_workers, s.env_splits) == expected
    # Valid for the run: W <= K and every worker has >= S envs.
    assert 0 <= s.num_env_workers <= num_envs
    assert num_envs // max(s.num_env_workers, 1) >= s.env_splits >= 1
    assert f"{cores} usable core(s)" in s.sampling_reason


def test_auto_is_the_default_and_explicit_values_are_kept(monkeypatch):
    s = resolved(monkeypatch, 2, num_envs=16)
    assert (s.num_env_workers, s.env_splits) == (2, 2)
    s = resolved(monkeypatch, 2, num_envs=16, num_env_workers=0, env_splits=1)
    assert (s.num_env_workers, s.env_splits, s.sampling_reason) == (0, 1, "")
    # One of the two explicit: the other follows it.
    assert resolved(monkeypatch, 2, num_envs=16, num_env_workers=0).env_splits == 1
    assert resolved(monkeypatch, 2, num_envs=16, num_env_workers=4).env_splits == 2
    s = resolved(monkeypatch, 16, num_envs=8, env_splits=4)
    assert (s.num_env_workers, s.env_splits) == (2, 4)


def test_replace_resolves_auto_again_for_the_new_actor_count(monkeypatch):
    s = resolved(monkeypatch, 2, num_envs=16)
    assert (s.replace(num_actors=2).num_env_workers, s.replace(num_actors=2).env_splits) == (0, 1)
    explicit = resolved(monkeypatch, 2, num_envs=16, num_env_workers=2, env_splits=1)
    assert explicit.replace(num_actors=2).num_env_workers == 2


def test_ray_backend_auto_keeps_the_envs_in_the_actor():
    choice = choose_sampling("auto", "auto", cores=16, num_actors=1, num_envs=16,
                             backend="ray")
    assert (choice.num_env_workers, choice.env_splits) == (0, 1)
    assert "Ray" in choice.reason


@pytest.mark.parametrize("field,value,message", [
    ("num_env_workers", "many", r"Trainer.num_env_workers must be an integer >= 0 or 'auto', "
                                r"got 'many'"),
    ("env_splits", 0, r"Trainer.env_splits must be an integer >= 1 or 'auto', got 0"),
    ("num_env_workers", 17, r"Trainer.num_env_workers must be an integer in \[0, "
                            r"num_envs=16\], got 17"),
])
def test_bad_values_name_the_setting(monkeypatch, field, value, message):
    with pytest.raises(ConfigError, match=message):
        resolved(monkeypatch, 2, num_envs=16, **{field: value})


def test_cheap_envs_step_in_the_actor():
    # HalfCheetah-like: 0.75 ms a step, 16 envs = 12 ms > 3 ms: workers.
    costly = choose_sampling("auto", "auto", cores=2, num_actors=1, num_envs=16,
                             env_step_s=0.75e-3)
    assert (costly.num_env_workers, costly.env_splits) == (2, 2)
    assert "all 16 in 12.0 ms" in costly.reason and "cheap" not in costly.reason
    # InvertedPendulum-like: 0.1 ms a step, 8 envs = 0.8 ms < 3 ms: no workers.
    cheap = choose_sampling("auto", "auto", cores=2, num_actors=1, num_envs=8,
                            env_step_s=0.1e-3)
    assert (cheap.num_env_workers, cheap.env_splits) == (0, 1)
    assert "< 3 ms: cheap" in cheap.reason
    # An explicit W is kept whatever the env costs.
    explicit = choose_sampling(2, "auto", cores=2, num_actors=1, num_envs=8, env_step_s=1e-6)
    assert (explicit.num_env_workers, explicit.env_splits) == (2, 2)


def test_fitted_to_env_resolves_only_auto(monkeypatch):
    s = resolved(monkeypatch, 2, num_envs=16)
    assert (s.num_env_workers, s.env_splits) == (2, 2)
    fitted = s.fitted_to_env(1e-5)
    assert (fitted.num_env_workers, fitted.env_splits) == (0, 1)
    assert fitted.fitted_to_env(1e-2).num_env_workers == 2  # from the configured "auto"
    explicit = resolved(monkeypatch, 2, num_envs=16, num_env_workers=2, env_splits=2)
    assert explicit.fitted_to_env(1e-5) is explicit


@pytest.mark.parametrize("cores,num_actors,fields,matters", [
    (2, 1, {}, True),                              # auto W -> 2: a cheap env would make it 0
    (2, 2, {}, False),                             # auto W -> 0 already
    (1, 1, {}, False),
    (2, 1, {"num_env_workers": 2}, False),         # explicit W, auto S
    (2, 1, {"env_splits": 2}, True),               # auto W with an explicit S
    (2, 1, {"num_env_workers": 0, "env_splits": 1}, False),
])
def test_the_env_is_probed_only_where_its_step_time_can_change_the_choice(
        monkeypatch, cores, num_actors, fields, matters):
    s = resolved(monkeypatch, cores, num_actors=num_actors, num_envs=16, **fields)
    assert s.step_time_matters is matters
    if not matters:  # a cheap env changes nothing then
        fitted = s.fitted_to_env(1e-7)
        assert (fitted.num_env_workers, fitted.env_splits) == (s.num_env_workers, s.env_splits)


def test_build_parts_skips_the_probe_where_it_cannot_matter(monkeypatch):
    import alf_async.training.parts as parts

    def no_probe(*args, **kwargs):
        raise AssertionError("the env was probed")

    monkeypatch.setattr(parts, "probe_env_step_seconds", no_probe)
    # unroll_length x num_envs = PPOLearner's default minibatch of 4096
    s = resolved(monkeypatch, 2, num_actors=2, num_envs=4, unroll_length=1024)
    built = parts.build_parts(s)
    assert (built.settings.num_env_workers, built.settings.env_splits) == (0, 1)
    monkeypatch.setattr(parts, "probe_env_step_seconds", lambda *a, **k: 1e-7)
    built = parts.build_parts(resolved(monkeypatch, 2, num_actors=1, num_envs=4,
                                       unroll_length=1024))
    assert (built.settings.num_env_workers, built.settings.env_splits) == (0, 1)  # cheap


def test_env_step_seconds_measures_a_real_env():
    from alf_async.envs.gym_env import make_env
    from alf_async.envs.step_cost import env_step_seconds

    env = make_env("CartPole-v1")  # ends episodes often: resets are part of the cost
    try:
        seconds = env_step_seconds(env, max_steps=300, budget_s=5.0)
    finally:
        env.close()
    assert 0 < seconds < 0.01


def test_the_choice_is_logged_at_start(tmp_path):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "alf_async.bin.train",
           "--gin_file=ppo_bullet_inverted_pendulum.gin", f"--root_dir={tmp_path / 'run'}",
           "--gin_param=Trainer.num_env_workers='auto'",
           "--gin_param=Trainer.env_splits='auto'", "--gin_param=Trainer.num_envs=4",
           "--gin_param=Trainer.unroll_length=8", "--gin_param=Trainer.num_env_steps=0",
           "--gin_param=Trainer.num_iterations=1", "--gin_param=PPOLearner.mini_batch_size=8",
           "--gin_param=MetricsRecorder.tensorboard=False"]
    result = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    # InvertedPendulum steps in well under 3 ms for 4 envs: they stay in the actor.
    assert re.search(r"sampling: Trainer.num_env_workers='auto' -> 0, "
                     r"Trainer.env_splits='auto' -> 1 \(\d+ usable core\(s\), 1 actor\(s\).*"
                     r"one env steps in [\d.]+ ms, all 4 in [\d.]+ ms < 3 ms: cheap\)",
                     result.stderr), result.stderr[-3000:]
    assert "1 actor(s) x 4 envs (process backend, 0 env workers and 1 env split(s) each)" \
        in result.stderr
