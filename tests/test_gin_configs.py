"""Every shipped gin config parses and builds a Trainer (no process is started).

This keeps the example configs honest: a renamed parameter, a broken include or
impossible sizes in any file under gin_configs/ fail here.
"""

from __future__ import annotations

import glob
import os

import gin
import pytest

from alf_async.config import parse_config
from alf_async.envs.atari import ale_installed
from alf_async.training.hogwild_loop import HogwildLoop
from alf_async.training.off_policy import OffPolicyLoop
from alf_async.training.trainer import Trainer

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(REPO, "gin_configs", "*.gin")))
# The PyBullet suite of the rl-baselines3-zoo's PPO table (one recipe,
# gin_configs/recipes/ppo_bullet_locomotion.gin).
LOCOMOTION = ("half_cheetah", "ant", "hopper", "walker2d")


def test_expected_configs_are_shipped():
    for name in ("ppo_bullet_humanoid.gin", "async_ppo_bullet_humanoid.gin",
                 "ppo_bullet_inverted_pendulum.gin", "async_ppo_bullet_inverted_pendulum.gin",
                 "ppo_bullet_half_cheetah.gin", "async_ppo_bullet_half_cheetah.gin",
                 "ppo_cartpole.gin", "async_ppo_cartpole.gin",
                 *(f"{prefix}ppo_bullet_{env}.gin" for env in LOCOMOTION
                   for prefix in ("", "async_"))):
        assert name in CONFIGS


@pytest.mark.parametrize("name", CONFIGS)
def test_config_builds_a_trainer(name, tmp_path):
    parse_config([name])
    try:
        trainer = Trainer(root_dir=str(tmp_path / "run"))
        s = trainer.settings
        assert s.num_env_steps > 0 or s.num_iterations > 0
        assert isinstance(trainer.loop, HogwildLoop) == (s.runtime == "hogwild")
        if s.off_policy:
            assert isinstance(trainer.loop, (OffPolicyLoop, HogwildLoop))
            # (Hogwild: each of the N workers collects its share first.)
            share = trainer.replay_settings.learning_starts // (
                s.num_actors if s.runtime == "hogwild" else 1)
            assert trainer.learner.batch_size <= share
        else:
            assert trainer.learner.mini_batch_size <= s.unroll_length * s.num_envs
    finally:
        gin.clear_config()


def test_async_humanoid_differs_from_sync_only_in_num_actors(tmp_path):
    values = {}
    for name in ("ppo_bullet_humanoid.gin", "async_ppo_bullet_humanoid.gin"):
        parse_config([name])
        trainer = Trainer(root_dir=str(tmp_path / name))
        learner = trainer.learner
        values[name] = trainer.settings.configured_dict()  # "auto" W and S unresolved
        values[name].update({f"learner.{k}": v for k, v in vars(learner).items()
                             if isinstance(v, (int, float, str, bool))})
        gin.clear_config()
    sync, async_ = values["ppo_bullet_humanoid.gin"], values["async_ppo_bullet_humanoid.gin"]
    differing = {k for k in sync if sync[k] != async_.get(k)}
    assert differing == {"num_actors"}
    assert sync["num_actors"] == 1 and async_["num_actors"] == 2
    assert sync["num_envs"] == 96 and sync["unroll_length"] == 512
    assert sync["env_name"] == "HumanoidBulletEnv-v0"


# Async files that also choose how a stale batch is corrected: without lag these
# settings train exactly as PPO2 does, so
# the sync and async files still train the same way.
# The decoupled correction is the default: only the recomputation and the
# weights' truncation differ from the sync file.
DECOUPLED_UNTRUNCATED = {"learner.recompute_values": True, "learner.rho_bar": 100.0}
ASYNC_LAG_BINDINGS = {"ppo_bullet_half_cheetah": DECOUPLED_UNTRUNCATED,
                      "ppo_bullet_ant": DECOUPLED_UNTRUNCATED,
                      # Advantages normalized under pi_prox (the same as PPO2's
                      # on on-policy data) and a floor under the action std
                      # that a policy learning to hop stays above.
                      "ppo_bullet_hopper": {"learner.advantage_moments": "proximal",
                                            "actor.min_log_std": -3.5}}
# Async files that run the sync file's envs as two actors of half as many each
# (the same envs in all, each iteration's batch half the sync one's).
ASYNC_ENVS_SPLIT = ("ppo_bullet_walker2d", "ppo_bullet_hopper")
# Async files that split the sync file's envs the same way with unrolls twice
# as long (each iteration's batch as large as the sync one's).
ASYNC_ENVS_SPLIT_LONGER_UNROLLS = ("ppo_bullet_ant",)


@pytest.mark.parametrize("stem", [
    "ppo_bullet_inverted_pendulum", "ppo_cartpole", "ppo_image_dot_centering",
    *(f"ppo_bullet_{env}" for env in LOCOMOTION),
    pytest.param("ppo_atari_pong", marks=pytest.mark.skipif(
        not ale_installed(), reason="ale-py (the atari extra) is not installed"))])
def test_async_file_differs_from_sync_only_in_its_actors_and_lag_settings(stem, tmp_path):
    values = {}
    for name in (f"{stem}.gin", f"async_{stem}.gin"):
        parse_config([name])
        try:
            trainer = Trainer(root_dir=str(tmp_path / name))
            values[name] = trainer.settings.configured_dict()  # "auto" W and S unresolved
            values[name].update({f"learner.{k}": v for k, v in vars(trainer.learner).items()
                                 if isinstance(v, (int, float, str, bool))})
            actor = getattr(trainer.learner.model, "actor", None)
            actor_settings = vars(actor) if actor is not None else {}
            values[name].update({f"actor.{k}": v for k, v in actor_settings.items()
                                 if isinstance(v, (int, float, str, bool))})
        finally:
            gin.clear_config()
    sync, async_ = values[f"{stem}.gin"], values[f"async_{stem}.gin"]
    lag_bindings = ASYNC_LAG_BINDINGS.get(stem, {})
    longer_unrolls = stem in ASYNC_ENVS_SPLIT_LONGER_UNROLLS
    split = ({"num_envs"} if stem in ASYNC_ENVS_SPLIT else
             {"num_envs", "unroll_length"} if longer_unrolls else set())
    assert {k for k in sync if sync[k] != async_.get(k)} == {"num_actors", *lag_bindings,
                                                               *split}
    assert (sync["num_actors"], async_["num_actors"]) == (1, 2)
    if split:
        assert async_["num_envs"] * async_["num_actors"] == sync["num_envs"]
    if longer_unrolls:
        assert (async_["num_envs"] * async_["unroll_length"]
                == sync["num_envs"] * sync["unroll_length"])
    assert {k: async_[k] for k in lag_bindings} == lag_bindings


@pytest.mark.parametrize("base, hogwild", [
    ("ppo_bullet_inverted_pendulum.gin", "hogwild_ppo_bullet_inverted_pendulum.gin"),
    ("sac_bullet_half_cheetah.gin", "hogwild_sac_bullet_half_cheetah.gin")])
def test_hogwild_file_differs_from_its_base_only_in_runtime_and_workers(base, hogwild,
                                                                          tmp_path):
    values = {}
    for name in (base, hogwild):
        parse_config([name])
        try:
            values[name] = Trainer(root_dir=str(tmp_path / name)).settings.as_dict()
        finally:
            gin.clear_config()
    differing = {k for k in values[base] if values[base][k] != values[hogwild][k]}
    assert differing == {"runtime", "num_actors"}
    assert values[hogwild]["runtime"] == "hogwild" and values[hogwild]["num_actors"] == 2


def test_async_sac_differs_from_sync_only_in_the_async_bindings(tmp_path):
    values = {}
    for name in ("sac_bullet_half_cheetah.gin", "async_sac_bullet_half_cheetah.gin"):
        parse_config([name])
        trainer = Trainer(root_dir=str(tmp_path / name))
        values[name] = {**trainer.settings.as_dict(),
                        **{f"replay.{k}": v for k, v in vars(trainer.replay_settings).items()},
                        **{f"learner.{k}": v for k, v in vars(trainer.learner).items()
                           if isinstance(v, (int, float, str, bool))}}
        gin.clear_config()
    sync, async_ = values["sac_bullet_half_cheetah.gin"], values[
        "async_sac_bullet_half_cheetah.gin"]
    assert {k for k in sync if sync[k] != async_.get(k)} == {"num_actors", "replay.strict"}
    assert sync["algorithm"] == "sac" and sync["replay.env_steps_per_gradient_step"] == 1.0
    assert sync["learner.batch_size"] == 256 and sync["learner.gamma"] == 0.98


@pytest.mark.parametrize("name", [f"{prefix}ppo_bullet_{env}.gin" for env in LOCOMOTION[1:]
                                  for prefix in ("", "async_")])
def test_locomotion_config_trains_a_few_iterations(name, tmp_path):
    """Each suite config runs as shipped but for its sizes: its env, network,
    learner settings and number of actors (2 async ones as processes)."""
    parse_config([name])
    gin.bind_parameter("PPOLearner.mini_batch_size", 16)
    gin.bind_parameter("PPOLearner.num_epochs", 1)
    try:
        trainer = Trainer(root_dir=str(tmp_path / "run"), num_envs=2, unroll_length=16,
                          num_iterations=2, num_env_steps=0)
        counters = trainer.train()
        expected_actors = 2 if name.startswith("async_") else 1
        assert trainer.settings.num_actors == expected_actors
    finally:
        gin.clear_config()
    assert counters["iteration"] == 2 and counters["env_steps"] == 2 * 2 * 16
