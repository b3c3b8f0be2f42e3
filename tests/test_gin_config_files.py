"""gin files as users write them: includes relative to the including file, from
any working directory; errors that name the file and line; a saved run config
that stands alone."""

from __future__ import annotations

import os
import sys

import gin
import pytest

from alf_async.config import CONFIG_PATH_ENV, ConfigError, gin_imports, parse_config


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv(CONFIG_PATH_ENV, raising=False)
    yield
    gin.clear_config()


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture
def user_folder(tmp_path):
    """/cfg/my.gin includes base.gin (beside it) and sub/mid.gin, which includes
    leaf.gin beside itself; the run starts from an unrelated folder."""
    cfg = tmp_path / "cfg"
    write(cfg / "base.gin", "include 'ppo_bullet_inverted_pendulum.gin'\n"
                            "Trainer.num_envs = 4\nTrainer.seed = 1\n")
    write(cfg / "sub" / "mid.gin", "include 'leaf.gin'\nTrainer.unroll_length = 16\n")
    write(cfg / "sub" / "leaf.gin", "Trainer.seed = 7\nTrainer.unroll_length = 8\n")
    write(cfg / "my.gin", "# my config\ninclude 'base.gin'\ninclude 'sub/mid.gin'\n"
                          "Trainer.num_envs = 6\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return cfg, elsewhere


def test_includes_resolve_against_the_including_file(user_folder, monkeypatch):
    cfg, elsewhere = user_folder
    monkeypatch.chdir(elsewhere)
    parse_config([str(cfg / "my.gin")])
    # Later bindings win, in the order the includes stand in the files.
    assert gin.query_parameter("Trainer.num_envs") == 6
    assert gin.query_parameter("Trainer.seed") == 7  # leaf.gin after base.gin
    assert gin.query_parameter("Trainer.unroll_length") == 16  # mid.gin after leaf.gin
    # base.gin's include of a shipped config went through gin_configs/.
    assert gin.query_parameter("PPOLearner.mini_batch_size") == 512


def test_the_including_folder_comes_before_gin_configs(tmp_path, monkeypatch):
    cfg = tmp_path / "cfg"
    write(cfg / "ppo_bullet_inverted_pendulum.gin", "Trainer.num_envs = 9\n"
                                                    "Trainer.num_iterations = 1\n")
    write(cfg / "top.gin", "include 'ppo_bullet_inverted_pendulum.gin'\n")
    monkeypatch.chdir(tmp_path)
    parse_config([str(cfg / "top.gin")])
    assert gin.query_parameter("Trainer.num_envs") == 9


def test_extra_search_path_is_searched_after_gin_configs(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    write(shared / "team_base.gin", "Trainer.num_envs = 5\n")
    top = write(tmp_path / "cfg" / "top.gin", "include 'team_base.gin'\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"gin file 'team_base\.gin' \(included at .*top\.gin, "
                                          r"line 1\) was not found"):
        parse_config([top])
    parse_config([top], extra_search_path=[str(shared)])
    assert gin.query_parameter("Trainer.num_envs") == 5


def test_include_cycle_is_reported(tmp_path):
    a = write(tmp_path / "a.gin", "include 'b.gin'\n")
    write(tmp_path / "b.gin", "include 'a.gin'\n")
    with pytest.raises(ConfigError, match=r"include each other in a cycle: .*a\.gin -> "
                                          r".*b\.gin -> .*a\.gin"):
        parse_config([a])


def test_errors_name_the_file_and_line(tmp_path):
    bad = write(tmp_path / "bad.gin", "Trainer.num_envs = 2\n\nTrainer.nope = 3\n")
    with pytest.raises(ConfigError, match=r"Unknown gin parameter 'nope' of 'Trainer' in gin "
                                          r"file .*bad\.gin, line 3"):
        parse_config([bad])
    write(tmp_path / "inner.gin", "Trainer.num_envs = 2\nTrainer.seed = [1\n")
    outer = write(tmp_path / "outer.gin", "Trainer.num_envs = 3\ninclude 'inner.gin'\n")
    with pytest.raises(ConfigError, match=r"Syntax error in gin file .*inner\.gin"):
        parse_config([outer])
    with pytest.raises(ConfigError, match=r"--gin_param='import alf_async_nothing_here' "
                                          r"imports a module that cannot be imported"):
        parse_config([], ["import alf_async_nothing_here"])


def test_saved_config_stands_alone(tmp_path, monkeypatch):
    """config_str() of a config with includes and a user import parses alone, to the
    same bindings, after the user's folder is gone (the trainer saves exactly this
    text as <root_dir>/config.gin)."""
    modules = tmp_path / "modules"
    write(modules / "alf_async_user_configurables.py",
          "import gin\n\n@gin.configurable\ndef user_thing(size=1):\n    return size\n")
    monkeypatch.syspath_prepend(str(modules))
    cfg = tmp_path / "cfg"
    write(cfg / "base.gin", "include 'ppo_bullet_inverted_pendulum.gin'\n"
                            "Trainer.num_envs = 4\n")
    write(cfg / "my.gin", "import alf_async_user_configurables\ninclude 'base.gin'\n"
                          "user_thing.size = 3\nTrainer.unroll_length = 64\n")
    parse_config([str(cfg / "my.gin")])
    saved = gin.config_str()
    assert gin_imports(saved) == ["alf_async_user_configurables"]
    for name in ("base.gin", "my.gin"):
        os.remove(cfg / name)
    run_config = write(tmp_path / "run" / "config.gin", saved)
    parse_config([run_config])
    assert gin.query_parameter("user_thing.size") == 3
    assert gin.query_parameter("Trainer.num_envs") == 4
    assert gin.query_parameter("Trainer.unroll_length") == 64
    assert gin.query_parameter("PPOLearner.mini_batch_size") == 512
    sys.modules.pop("alf_async_user_configurables", None)
