"""Bad input to the train command gets a short, clear error, and gin files resolve.

Runs ``python -m alf_async.bin.train`` as a user would, from a directory outside
the project, and proves that each kind of bad input -- an unknown gin parameter
in a gin file (the message names the parameter and the file), a gin file that is
not found (the message lists every search path directory, including those of
``ALF_ASYNC_CONFIG_PATH``), an unknown env id (named, with the close match
suggested), ``mini_batch_size`` larger than ``num_envs * unroll_length``, a
missing ``--root_dir`` -- exits with status 2, prints one paragraph on stderr
that starts with ``alf_async: error:`` (nothing before it, no blank line inside),
and no Python traceback.

It also proves that ``include`` of a bare file name resolves through the search
path: the current directory, the project's gin_configs/, and directories given
in ``ALF_ASYNC_CONFIG_PATH`` -- both through the command line and through
``alf_async.config.parse_config`` in-process (where repeated calls must use the
current search path, not one left over from an earlier call); and, in-process,
that an unknown ``--gin_param`` binding and a missing ``include`` raise
``ConfigError`` naming them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import gin
import pytest

from alf_async.config import CONFIG_PATH_ENV, ConfigError, gin_search_path, parse_config

# One worker runs this module, so its module fixtures run once rather than
# once on each pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("cli_errors")

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = [sys.executable, "-m", "alf_async.bin.train"]
PENDULUM = "--gin_file=ppo_bullet_inverted_pendulum.gin"


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """Run every bad-input case once (a few at a time) and keep the results."""
    base = tmp_path_factory.mktemp("cli")
    work, extra = base / "work", base / "extra"
    bad_gin = _write(work / "bad_param.gin",
                     "include 'ppo_bullet_inverted_pendulum.gin'\n"
                     "PPOLearner.not_a_param = 1\n")
    _write(work / "top.gin",
           "include 'small_base.gin'\nPPOLearner.mini_batch_size = 1000\n")
    _write(extra / "small_base.gin",
           "include 'ppo_bullet_inverted_pendulum.gin'\n"
           "Trainer.num_envs = 3\nTrainer.unroll_length = 16\n")
    _write(work / "unclosed.gin", "include 'ppo_bullet_inverted_pendulum.gin'\n"
                                  "Trainer.unroll_length = (128\n")
    _write(work / "imports_missing.gin", "import alf_async_no_such_module\n"
                                         "include 'ppo_bullet_inverted_pendulum.gin'\n")
    root = f"--root_dir={base / 'run'}"
    cases = {
        "param_in_file": (["--gin_file=bad_param.gin", root], None),
        "file_not_found": (["--gin_file=no_such_config.gin", root], str(extra)),
        "unknown_env": ([PENDULUM, root,
                         "--gin_param=Trainer.env_name='InvertedPendulumBulletEnv-v9'"], None),
        "mini_batch_too_large": ([PENDULUM, root, "--gin_param=Trainer.num_envs=2",
                                  "--gin_param=Trainer.unroll_length=16",
                                  "--gin_param=PPOLearner.mini_batch_size=1000"], None),
        "unclosed_bracket": (["--gin_file=unclosed.gin", root], None),
        "missing_module": (["--gin_file=imports_missing.gin", root], None),
        "include_chain": (["--gin_file=top.gin", root], str(extra)),
    }

    def run(item):
        name, (args, config_path) = item
        # Each case in a run directory of its own: cases run a few at a time,
        # and a run directory holds one training at a time (its run lock).
        args = [f"--root_dir={base / 'runs' / name}" if a == root else a for a in args]
        env = dict(os.environ)
        env.pop(CONFIG_PATH_ENV, None)
        if config_path:
            env[CONFIG_PATH_ENV] = config_path
        proc = subprocess.run(TRAIN + args, cwd=str(work), env=env, capture_output=True,
                              text=True, timeout=180)
        return name, proc

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = dict(pool.map(run, cases.items()))
    results["_paths"] = {"work": str(work), "extra": str(extra), "bad_gin": bad_gin,
                         "runs": [str(base / "runs" / name) for name in cases]}
    return results


def _user_error(proc) -> str:
    """Check the common contract and return the error paragraph."""
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, proc.stderr
    err = proc.stderr.strip()
    assert err.startswith("alf_async: error:"), f"stderr does not start with the error:\n{err}"
    assert "\n\n" not in err, f"more than one paragraph:\n{err}"
    assert err.count("alf_async: error:") == 1
    return err


def test_unknown_gin_parameter_in_file(cli):
    err = _user_error(cli["param_in_file"])
    assert "not_a_param" in err and "PPOLearner" in err
    assert cli["_paths"]["bad_gin"] in err


def test_gin_file_not_found_lists_search_path(cli):
    err = _user_error(cli["file_not_found"])
    assert "no_such_config.gin" in err
    paths = cli["_paths"]
    for directory in (paths["work"], os.path.join(REPO_ROOT, "gin_configs"), paths["extra"]):
        assert directory in err, f"{directory} not listed in: {err}"
    # ... in search order: current directory, gin_configs/, then the env variable's
    assert (err.index(paths["work"]) < err.index(os.path.join(REPO_ROOT, "gin_configs"))
            < err.index(paths["extra"]))
    assert CONFIG_PATH_ENV in err


def test_unknown_env_id(cli):
    err = _user_error(cli["unknown_env"])
    assert "InvertedPendulumBulletEnv-v9" in err
    assert "InvertedPendulumBulletEnv-v0" in err  # the close match is suggested


def test_mini_batch_larger_than_batch(cli):
    err = _user_error(cli["mini_batch_too_large"])
    assert "mini_batch_size" in err and "1000" in err and "32" in err


def test_unclosed_bracket_names_file_and_line(cli):
    err = _user_error(cli["unclosed_bracket"])
    assert re.search(r"Syntax error in gin file .*unclosed\.gin, line 3: EOF in multi-line "
                     r"statement \(an unclosed bracket or string\?\)", err), err


def test_import_of_a_missing_module_names_it(cli):
    err = _user_error(cli["missing_module"])
    assert re.search(r"gin file .*imports_missing\.gin, line 1 imports a module that cannot "
                     r"be imported \(ModuleNotFoundError: No module named "
                     r"'alf_async_no_such_module'\)", err), err


def test_include_chain_resolves_through_search_path_on_command_line(cli):
    """top.gin (current dir) includes small_base.gin (ALF_ASYNC_CONFIG_PATH), which
    includes ppo_bullet_inverted_pendulum.gin (gin_configs/). The run stops at the
    batch-size check, whose message shows the included num_envs=3 and
    unroll_length=16 were applied."""
    err = _user_error(cli["include_chain"])
    assert "unroll_length * num_envs = 16 * 3 = 48" in err
    assert "Path not found" not in cli["include_chain"].stderr


def test_no_run_started_on_bad_input(cli):
    for run in cli["_paths"]["runs"]:
        assert not os.path.exists(os.path.join(run, "checkpoints")) or not os.listdir(
            os.path.join(run, "checkpoints"))
        assert not os.path.exists(os.path.join(run, "metrics.jsonl"))


# -- in-process: include resolution through parse_config ------------------------

@pytest.fixture
def gin_clean():
    yield
    gin.clear_config()


def _layout(tmp_path, name, value):
    """work/top.gin includes <name>.gin, which lives in extra_<value>/ only."""
    extra = tmp_path / f"extra_{value}"
    _write(extra / f"{name}.gin",
           f"include 'ppo_bullet_inverted_pendulum.gin'\nTrainer.num_envs = {value}\n")
    _write(tmp_path / "work" / "top.gin", f"include '{name}.gin'\nPPOLearner.num_epochs = 2\n")
    return tmp_path / "work", extra


def test_include_resolves_through_env_var_directory(tmp_path, monkeypatch, gin_clean):
    work, extra = _layout(tmp_path, "base", 3)
    monkeypatch.chdir(work)
    monkeypatch.setenv(CONFIG_PATH_ENV, os.pathsep.join([str(tmp_path / "nowhere"),
                                                         str(extra)]))
    assert gin_search_path() == [str(work), os.path.join(REPO_ROOT, "gin_configs"),
                                 str(tmp_path / "nowhere"), str(extra)]
    assert parse_config(["top.gin"]) == [str(work / "top.gin")]
    assert gin.query_parameter("Trainer.num_envs") == 3  # from extra/base.gin
    assert gin.query_parameter("PPOLearner.num_epochs") == 2  # from top.gin
    # from gin_configs/ppo_bullet_inverted_pendulum.gin, included by base.gin
    assert gin.query_parameter("Trainer.env_name") == "InvertedPendulumBulletEnv-v0"
    assert gin.query_parameter("PPOLearner.mini_batch_size") == 512


def test_include_uses_the_current_search_path_on_each_parse(tmp_path, monkeypatch,
                                                            gin_clean):
    work, extra_3 = _layout(tmp_path, "base", 3)
    _, extra_5 = _layout(tmp_path, "base", 5)
    monkeypatch.chdir(work)
    monkeypatch.setenv(CONFIG_PATH_ENV, str(extra_3))
    parse_config(["top.gin"])
    assert gin.query_parameter("Trainer.num_envs") == 3
    monkeypatch.setenv(CONFIG_PATH_ENV, str(extra_5))
    parse_config(["top.gin"])
    assert gin.query_parameter("Trainer.num_envs") == 5
    monkeypatch.delenv(CONFIG_PATH_ENV)
    with pytest.raises(ConfigError, match="base.gin"):
        parse_config(["top.gin"])


def test_config_errors_in_process(tmp_path, monkeypatch, gin_clean):
    """The same ConfigError paths, without a subprocess: an unknown parameter in
    --gin_param names it and the binding; a missing include names the file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_PATH_ENV, raising=False)
    with pytest.raises(ConfigError) as info:
        parse_config(["ppo_bullet_inverted_pendulum.gin"], ["Trainer.bogus_knob=3"])
    assert "bogus_knob" in str(info.value) and "--gin_param" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_config(["ppo_bullet_inverted_pendulum.gin"], ["NoSuchThing.x=3"])
    assert "NoSuchThing" in str(info.value)
    missing = _write(tmp_path / "missing_include.gin", "include 'no_such_base.gin'\n")
    with pytest.raises(ConfigError) as info:
        parse_config([missing])
    assert "no_such_base.gin" in str(info.value) and missing in str(info.value)


def test_current_directory_comes_before_gin_configs(tmp_path, monkeypatch, gin_clean):
    _write(tmp_path / "ppo_bullet_inverted_pendulum.gin", "Trainer.num_envs = 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CONFIG_PATH_ENV, raising=False)
    assert parse_config(["ppo_bullet_inverted_pendulum.gin"]) == [
        str(tmp_path / "ppo_bullet_inverted_pendulum.gin")]
    assert gin.query_parameter("Trainer.num_envs") == 7
    with pytest.raises(ValueError):  # the project's file (which sets it) was not read
        gin.query_parameter("PPOLearner.mini_batch_size")
