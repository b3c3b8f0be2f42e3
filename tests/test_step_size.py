"""The PPO learner's step-size control: the linear learning-rate schedule and
the per-iteration KL budget (``algorithms.step_size``)."""

from __future__ import annotations

import pytest
import torch

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.algorithms.step_size import StepSizeControl
from alf_async.settings import TrainerSettings
from alf_async.utils.validation import ConfigError
from test_lag_correction import _batch as lag_batch


def _batch(seed: int = 0) -> dict:
    """A [16, 8] batch of random observations, actions and rewards (the lag
    tests' maker)."""
    return lag_batch(seed, T=16, K=8)


def test_linear_schedule_falls_to_its_end_fraction():
    control = StepSizeControl(1e-3, "linear", end_fraction=0.1)
    assert control.learning_rate_at(0.0) == pytest.approx(1e-3)
    assert control.learning_rate_at(0.5) == pytest.approx(0.55e-3)
    assert control.learning_rate_at(1.0) == pytest.approx(1e-4)
    assert control.learning_rate_at(3.0) == pytest.approx(1e-4)  # clamped to the end
    assert control.learning_rate_at(None) == pytest.approx(1e-3)  # no progress: the start
    assert StepSizeControl(1e-3).learning_rate_at(0.7) == 1e-3  # constant


def test_the_clip_range_follows_the_learning_rate_when_annealed():
    control = StepSizeControl(1e-3, "linear", end_fraction=0.1, anneal_clip_ratio=True)
    assert control.clip_ratio_at(0.2, 0.0) == pytest.approx(0.2)
    assert control.clip_ratio_at(0.2, 0.5) == pytest.approx(0.11)
    assert control.clip_ratio_at(0.2, 1.0) == pytest.approx(0.02)
    assert control.clip_ratio_at(0.2, None) == pytest.approx(0.2)
    assert StepSizeControl(1e-3, "linear").clip_ratio_at(0.2, 0.5) == 0.2  # not annealed


def test_an_annealed_clip_trains_like_that_clip_held_constant():
    """Halfway through the budget an annealed clip of 0.4 is 0.2: the same
    weights as a constant 0.2 at the same learning rate, not those of 0.4."""
    kwargs = dict(num_epochs=4, mini_batch_size=32, seed=3, learning_rate=3e-2,
                  learning_rate_schedule="linear")
    annealed = PPOLearner(3, 2, clip_ratio=0.4, anneal_clip_ratio=True, **kwargs)
    halved = PPOLearner(3, 2, clip_ratio=0.2, **kwargs)
    wide = PPOLearner(3, 2, clip_ratio=0.4, **kwargs)
    stats = annealed.train(_batch(), progress=0.5)
    assert stats["clip_ratio"] == pytest.approx(0.2)
    assert halved.train(_batch(), progress=0.5)["clip_ratio"] == pytest.approx(0.2)
    assert wide.train(_batch(), progress=0.5)["clip_ratio"] == pytest.approx(0.4)
    for a, b in zip(annealed.model.parameters(), halved.model.parameters()):
        torch.testing.assert_close(a, b)
    assert any(not torch.equal(a, b) for a, b in zip(annealed.model.parameters(),
                                                     wide.model.parameters()))


@pytest.mark.parametrize("kwargs, name", [
    (dict(learning_rate_schedule="cosine"), "learning_rate_schedule"),
    (dict(learning_rate_end_fraction=1.5), "learning_rate_end_fraction"),
    (dict(target_kl=0.0), "target_kl"),
    (dict(learning_rate=-1.0), "learning_rate"),
    (dict(anneal_clip_ratio=True), "anneal_clip_ratio"),  # needs a "linear" schedule
    (dict(anneal_clip_ratio="yes", learning_rate_schedule="linear"), "anneal_clip_ratio"),
])
def test_bad_settings_are_refused_by_name(kwargs, name):
    with pytest.raises(ConfigError, match=f"PPOLearner.{name}"):
        PPOLearner(3, 2, **kwargs)


def test_the_schedule_sets_the_step_size_of_each_iteration():
    kwargs = dict(num_epochs=2, mini_batch_size=32, seed=3, learning_rate_schedule="linear")
    learner = PPOLearner(3, 2, **kwargs)
    before = [p.detach().clone() for p in learner.model.parameters()]
    stats = learner.train(_batch(), progress=1.0)  # the end of the budget: lr 0
    assert stats["learning_rate"] == 0.0
    assert learner.optimizer.param_groups[0]["lr"] == 0.0
    for old, new in zip(before, learner.model.parameters()):
        torch.testing.assert_close(old, new)
    # At progress 0 the schedule trains exactly like a constant step size.
    constant, scheduled = PPOLearner(3, 2, **{**kwargs, "learning_rate_schedule": "constant"}), \
        PPOLearner(3, 2, **kwargs)
    stats = scheduled.train(_batch(), progress=0.0)
    constant.train(_batch(), progress=0.0)
    assert stats["learning_rate"] == pytest.approx(3e-4)
    for a, b in zip(constant.model.parameters(), scheduled.model.parameters()):
        torch.testing.assert_close(a, b)
    moved = any(not torch.equal(a, b) for a, b in zip(before, scheduled.model.parameters()))
    assert moved


def test_kl_budget_ends_the_iteration_early():
    kwargs = dict(num_epochs=4, mini_batch_size=32, seed=5, learning_rate=1e-2)
    full = PPOLearner(3, 2, **kwargs).train(_batch())
    assert full["gradient_steps"] == 4 * 4  # 128 samples / 32, 4 epochs
    assert "kl_early_stop" not in full
    stopped = PPOLearner(3, 2, target_kl=1e-6, **kwargs).train(_batch())
    assert stopped["kl_early_stop"] == 1.0
    # the first step starts at the proximal policy (KL 0); a large step then
    # exceeds the budget, and the rest of the iteration is skipped
    assert 1 <= stopped["gradient_steps"] < full["gradient_steps"]
    roomy = PPOLearner(3, 2, target_kl=10.0, **kwargs).train(_batch())
    assert roomy["kl_early_stop"] == 0.0 and roomy["gradient_steps"] == full["gradient_steps"]


def test_progress_is_the_used_share_of_the_budget():
    by_steps = TrainerSettings(num_env_steps=1000)
    assert by_steps.progress(iteration=3, env_steps=250) == pytest.approx(0.25)
    both = TrainerSettings(num_env_steps=1000, num_iterations=10)
    assert both.progress(iteration=5, env_steps=100) == pytest.approx(0.5)  # the larger
    assert both.progress(iteration=20, env_steps=5000) == 1.0


def test_a_training_run_gives_the_learner_its_progress(tmp_path):
    """A real sync run (InvertedPendulum, 4 iterations): iteration i trains at
    learning_rate * (1 - (i - 1) / 4), the share of the budget used before it,
    and with anneal_clip_ratio its clip range falls by the same factor."""
    import gin

    from alf_async.config import register_configurables
    from alf_async.training.trainer import Trainer
    from test_runtime_sync import read_metrics

    gin.clear_config()
    register_configurables()
    gin.parse_config("""
PPOLearner.mini_batch_size = 32
PPOLearner.num_epochs = 1
PPOLearner.learning_rate = 1e-3
PPOLearner.learning_rate_schedule = "linear"
PPOLearner.clip_ratio = 0.2
PPOLearner.anneal_clip_ratio = True
ActorNetwork.hidden_sizes = (16, 16)
ValueNetwork.hidden_sizes = (16, 16)
MetricsRecorder.tensorboard = False
""")
    try:
        Trainer(root_dir=str(tmp_path), env_name="InvertedPendulumBulletEnv-v0",
                num_envs=2, unroll_length=32, num_iterations=4, seed=1,
                checkpoint_interval=1000, learner_num_threads=1).train()
    finally:
        gin.clear_config()
    rows = read_metrics(tmp_path)
    assert [row["learning_rate"] for row in rows] == pytest.approx(
        [1e-3, 0.75e-3, 0.5e-3, 0.25e-3])
    assert [row["clip_ratio"] for row in rows] == pytest.approx([0.2, 0.15, 0.1, 0.05])
