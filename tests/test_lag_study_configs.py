"""bench/lag_study.py: every configuration of the study trains with the lag
correction and the values its name says, whatever the gin file it starts from
binds (the async HalfCheetah file binds decoupled on recomputed values)."""

from __future__ import annotations

import inspect

import gin
import pytest

from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.config import parse_config
from bench import lag_study

# name -> (lag_correction, recompute_values) the run must train with.
EXPECTED = {
    "sync": ("none", False), "sync_decoupled": ("decoupled", False),
    "n2_none": ("none", False), "n2_decoupled": ("decoupled", False),
    "n2_vtrace": ("vtrace", False), "n4_none": ("none", False),
    "n4_decoupled": ("decoupled", False), "n4_vtrace": ("vtrace", False),
    "n2_decoupled_recompute": ("decoupled", True), "n2_vtrace_recompute": ("vtrace", True),
    "n4_decoupled_recompute": ("decoupled", True), "n4_vtrace_recompute": ("vtrace", True),
    "n2_vtrace_gae_recompute": ("vtrace_gae", True), "n2_lockstep": ("none", False),
    "sync_behaviour_stats": ("none", False), "n2_none_behaviour_stats": ("none", False),
    "n2_decoupled_behaviour_stats": ("decoupled", False),
}


def _bound(setting: str):
    """The value gin binds for PPOLearner.<setting>, or the constructor's default."""
    try:
        return gin.query_parameter(f"PPOLearner.{setting}")
    except ValueError:
        return inspect.signature(PPOLearner.__init__).parameters[setting].default


def test_every_configuration_is_listed():
    assert set(lag_study.CONFIGS) == set(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_each_configuration_trains_with_the_correction_and_values_its_name_says(name):
    gin_file, params = lag_study.CONFIGS[name]
    parse_config([gin_file], params)
    try:
        bound = (_bound("lag_correction"), _bound("recompute_values"))
    finally:
        gin.clear_config()
    assert bound == EXPECTED[name]
