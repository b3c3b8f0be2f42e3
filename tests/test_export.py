"""Exported policies (Policy.export, the export command): a TorchScript file run
with torch.jit.load and an ONNX file run with onnxruntime give the actions of
``predict(deterministic=True)`` on 100 observations of the run's own env, for a
Box action with observation normalization (its mean unbounded or squashed), a
Discrete action, uint8 frames, an LSTM (over the sequence, carrying its state
and resetting it at episode starts) and SAC; the command writes the file and
refuses bad input in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import alf_async
from conftest import REPO_ROOT
from policy_runs import rollout, trained_run  # noqa: F401  (a fixture)

STEPS = 100


class OnnxPolicy:
    """An exported ONNX file run by onnxruntime: the callable of the docs."""

    def __init__(self, path: str):
        import onnxruntime

        self.session = onnxruntime.InferenceSession(path)
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, *arrays: np.ndarray):
        outputs = self.session.run(None, dict(zip(self.inputs, arrays)))
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


class TorchScriptPolicy:
    """An exported TorchScript file run by torch.jit.load, numpy in and out."""

    def __init__(self, path: str):
        self.module = torch.jit.load(path)

    def __call__(self, *arrays: np.ndarray):
        with torch.no_grad():
            out = self.module(*(torch.from_numpy(a) for a in arrays))
        return out.numpy() if isinstance(out, torch.Tensor) else tuple(o.numpy() for o in out)


def assert_same_actions(got: np.ndarray, want: np.ndarray, discrete: bool) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape,
                                                                 got.dtype, want.dtype)
    if discrete:
        np.testing.assert_array_equal(got, want)
    else:  # predict's numpy or torch arithmetic against the exported graph's
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["box", "box_squashed", "discrete", "image", "lstm", "sac"])
def test_exported_files_act_as_predict(kind, trained_run, tmp_path):  # noqa: F811
    policy = alf_async.load(trained_run(kind))
    steps = rollout(policy, STEPS)
    observations = steps["observation"]
    assert observations.dtype == policy.observation_space.dtype
    discrete = policy.action_space.dtype.kind == "i"
    files = {"torchscript": TorchScriptPolicy(policy.export(tmp_path / "policy.pt")),
             "onnx": OnnxPolicy(policy.export(tmp_path / "policy.onnx", format="onnx"))}
    for name, exported in files.items():
        if not policy.recurrent:
            want, _ = policy.predict(observations)  # one batch of 100
            assert_same_actions(exported(observations), want, discrete)
            assert_same_actions(exported(observations[:1]), want[:1], discrete)
            continue
        # The sequence, one step at a time: zeros where an episode starts.
        state = np.zeros((1, policy.state_size), np.float32)
        for t in range(STEPS):
            if steps["episode_start"][t]:
                state = np.zeros_like(state)
            np.testing.assert_allclose(state[0], steps["state"][t], atol=1e-5, err_msg=name)
            action, state = exported(observations[t:t + 1], state)
            assert_same_actions(action, steps["action"][t][None], discrete)
            np.testing.assert_allclose(state[0], steps["next_state"][t], atol=1e-5)
        assert steps["episode_start"][1:].any()  # the resets were exercised
    if discrete:
        assert set(np.unique(steps["action"])) <= set(range(policy.action_space.n))
    else:
        assert np.all(np.abs(steps["action"]) <= policy.action_space.high)


def test_onnx_without_its_packages_names_the_extra(trained_run, tmp_path,  # noqa: F811
                                                   monkeypatch):
    from alf_async.playback.export import ExportError

    policy = alf_async.load(trained_run("discrete"))
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if not installed
    with pytest.raises(ExportError, match=r"not installed: onnxscript.*alf_async\[export\]"):
        policy.export(tmp_path / "policy.onnx", format="onnx")
    assert not (tmp_path / "policy.onnx").exists()
    with pytest.raises(ExportError, match="unknown export format 'tflite'"):
        policy.export(tmp_path / "policy.tflite", format="tflite")


def _export_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "alf_async.bin.export", *args],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=200)


def test_the_export_command_writes_the_file(trained_run, tmp_path):  # noqa: F811
    root = trained_run("lstm")
    output = tmp_path / "sub" / "policy.onnx"
    result = _export_command(f"--root_dir={root}", "--format=onnx", f"--output={output}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"wrote onnx to {output}" in result.stdout
    umask = os.umask(0o022)
    os.umask(umask)
    assert output.stat().st_mode & 0o777 == 0o666 & ~umask  # as any new file: others may read it
    assert "input state [B, 64] float32" in result.stdout
    assert "output action [B] int64" in result.stdout
    run = OnnxPolicy(str(output))
    assert run.inputs == ["observation", "state"]
    policy = alf_async.load(root)
    observation = np.zeros((3, 2), np.float32)
    action, state = run(observation, np.zeros((3, 64), np.float32))
    want, want_state = policy.predict(observation)
    np.testing.assert_array_equal(action, want)
    np.testing.assert_allclose(state, want_state, atol=1e-5)


def test_the_export_command_refuses_bad_input_in_one_line(tmp_path):
    missing = tmp_path / "missing"
    result = _export_command(f"--root_dir={missing}")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip() == (f"alf_async.export: error: run directory {missing} "
                                     "does not exist")
    result = _export_command(f"--root_dir={missing}", "--format=tflite")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip() == ("alf_async.export: error: unknown export format "
                                     "'tflite': use one of torchscript, onnx")
    assert not os.listdir(tmp_path)
