"""Image observations end to end: shape and dtype kept from the env to the
network (uint8 frames in shared memory, trajectories and checkpoints' runs),
conv encoders, a small image env that a conv policy learns through the train
command, play recording the env's own frames, Atari through ale-py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from alf_async.algorithms.policy import NeuralPolicy
from alf_async.algorithms.ppo_learner import PPOLearner
from alf_async.envs.atari import ale_installed
from alf_async.envs.batched_env import BatchedEnv
from alf_async.envs.final_observations import FINAL_OBSERVATION_ROWS
from alf_async.envs.gym_env import env_spec, make_env
from alf_async.envs.image_envs import DOT_CENTERING_ID
from alf_async.envs.spaces import ObservationSpec, observation_spec
from alf_async.networks.encoders import ImageEncoder
from alf_async.runtime.process_pool import ProcessActorPool
from alf_async.runtime.trajectory import trajectory_nbytes
from alf_async.settings import TrainerSettings
from conftest import REPO_ROOT
from reliability_helpers import train_in_this_process
from scripted_policy import RightMovingDotPolicy
from test_runtime_equivalence import run_pool, weights

# One worker runs this module, so its module fixtures run once rather than
# once on each pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("pixels")

FRAME = ObservationSpec((9, 9, 1), "uint8")
DOT_CONFIG = "ppo_image_dot_centering.gin"


def test_observation_specs_keep_images_and_flatten_the_rest():
    box = gym.spaces.Box
    assert observation_spec(box(0, 255, (9, 9, 1), np.uint8)) == FRAME
    assert observation_spec(box(0, 255, (4, 84, 84), np.uint8)) == ObservationSpec(
        (4, 84, 84), "uint8")
    assert observation_spec(box(0, 255, (84, 84), np.uint8)).is_image
    assert observation_spec(box(0.0, 1.0, (8, 8, 3), np.float32)) == ObservationSpec(
        (8, 8, 3), "float32")
    flat = observation_spec(box(-1.0, 1.0, (3, 4), np.float64))
    assert flat == ObservationSpec((12,), "float32") and not flat.is_image
    assert env_spec("InvertedPendulumBulletEnv-v0")[0] == ObservationSpec((5,), "float32")


@pytest.mark.parametrize("num_workers,num_splits", [(0, 1), (2, 2)])
def test_frames_stay_uint8_through_shared_memory(num_workers, num_splits):
    env = BatchedEnv(DOT_CENTERING_ID, 4, num_workers, seed=3, num_splits=num_splits)
    try:
        assert env.observation_spec == FRAME
        assert env.arrays["observation"].dtype == np.uint8
        assert env.arrays["observation"].shape == (4, 9, 9, 1)
        obs = env.reset()
        assert obs.dtype == np.uint8 and obs.shape == (4, 9, 9, 1)
        assert (obs == 255).reshape(4, -1).sum(1).tolist() == [1, 1, 1, 1]  # one dot each
        result = env.step(np.full((4, 1), 2.0, np.float32))
        assert result.observation.dtype == np.uint8
    finally:
        env.close()


def test_trajectories_carry_uint8_frames_from_actor_processes():
    settings = TrainerSettings(env_name=DOT_CENTERING_ID, num_envs=4, num_env_workers=2,
                               env_splits=2, unroll_length=6, seed=5, num_iterations=2)
    pool = ProcessActorPool(settings, RightMovingDotPolicy, weights(0), FRAME, 1)
    batches = run_pool(pool, lambda b: len(b) >= 2)
    for _, arrays in batches:
        obs = arrays["observation"]
        assert obs.dtype == np.uint8 and obs.shape == (6, 4, 9, 9, 1)
        assert ((obs == 255).reshape(24, -1).sum(1) == 1).all()
        columns = np.argmax(obs.max(axis=(2, 4)), axis=2)  # [T, K]
        # Moving right: the dot's column grows by one a step until the border.
        assert (np.diff(columns, axis=0) >= 0).all()
        np.testing.assert_array_equal(arrays["value"], columns.astype(np.float32))
    # A frame costs 1 byte a pixel in the slots, not the 4 of float32: the
    # T x K frames acted on, s_T of each env and its R kept final frames.
    as_bytes = trajectory_nbytes(6, 4, FRAME, 1)
    as_floats = trajectory_nbytes(6, 4, ObservationSpec((9, 9, 1), "float32"), 1)
    assert as_floats - as_bytes == (6 + 1 + FINAL_OBSERVATION_ROWS) * 4 * 81 * 3


def _frame_batch(frames: np.ndarray, action: np.ndarray, log_prob: np.ndarray,
                 value: np.ndarray, rng: np.random.Generator) -> dict:
    """A learner batch of frames [T, K, *O] acted as given (action [T, K, 1],
    log_prob and value [T, K]), random rewards, no episode end."""
    T, K = frames.shape[:2]
    return {"observation": frames, "action": action, "log_prob": log_prob, "value": value,
            "reward": rng.standard_normal((T, K)).astype(np.float32),
            "terminated": np.zeros((T, K), bool), "truncated": np.zeros((T, K), bool),
            "truncation_value": np.zeros((T, K), np.float32),
            "bootstrap_value": np.zeros(K, np.float32)}


def test_the_learner_trains_on_uint8_frames_without_a_normalizer():
    spec, action_spec, _ = env_spec(DOT_CENTERING_ID)
    learner = PPOLearner(spec, action_spec, mini_batch_size=16, num_epochs=1)
    assert not learner.normalize_observations  # frames are scaled by 1/255 instead
    assert "normalizer" not in "".join(learner.weight_arrays())
    policy = NeuralPolicy(spec, action_spec)
    policy.load_weights(learner.weight_arrays())
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (8, 4, 9, 9, 1)).astype(np.uint8)  # [T, K, *O]
    action, log_prob, value = policy.act(frames.reshape(32, 9, 9, 1))
    batch = _frame_batch(frames, action.reshape(8, 4, 1), log_prob.reshape(8, 4),
                         value.reshape(8, 4), rng)
    seen = []  # what reaches the encoder: the stored uint8 frames, a minibatch at most
    learner.model.encoder.register_forward_pre_hook(
        lambda module, args: seen.append((args[0].dtype, len(args[0]))))
    stats = learner.train(batch)
    assert np.isfinite(stats["policy_loss"]) and stats["gradient_steps"] == 2
    assert seen and all(dtype == torch.uint8 and rows <= 16 for dtype, rows in seen)


def test_a_batch_of_frames_is_evaluated_a_chunk_at_a_time_to_the_same_numbers():
    learner = PPOLearner(FRAME, 3)
    frames = torch.randint(0, 256, (10,) + FRAME.shape, dtype=torch.uint8)
    actions = torch.randint(0, 3, (10, 1))
    with torch.no_grad():
        whole = learner.model.log_prob_and_value(frames, actions)
        chunked = learner.model.log_prob_and_value(frames, actions, chunk_rows=3)
    for a, b in zip(whole, chunked):
        assert a.shape == (10,)
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("shape,architecture,features", [
    ((4, 84, 84), "nature", 512), ((84, 84, 4), "auto", 512), ((84, 84), "nature", 512),
    ((64, 64, 3), "impala", 256), ((9, 9, 1), "auto", 128)])
def test_encoders_take_either_channel_order(shape, architecture, features):
    encoder = ImageEncoder(ObservationSpec(shape, "uint8"), architecture=architecture)
    frames = torch.randint(0, 256, (3,) + shape, dtype=torch.uint8)
    out = encoder(frames)
    assert out.shape == (3, features) and out.dtype == torch.float32
    assert encoder.architecture == ("small" if shape == (9, 9, 1) else
                                    architecture.replace("auto", "nature"))


def _conv_input_format(encoder: ImageEncoder, frames: torch.Tensor) -> torch.Tensor:
    """What the first convolution of ``encoder`` receives for ``frames``."""
    seen = []
    hook = encoder.convs[0].register_forward_pre_hook(lambda m, args: seen.append(args[0]))
    try:
        encoder(frames)
    finally:
        hook.remove()
    return seen[0]


@pytest.mark.parametrize("shape,architecture", [
    ((4, 84, 84), "nature"), ((84, 84, 4), "nature"), ((84, 84), "nature"),
    ((40, 40, 3), "impala")])
def test_convolutions_run_channels_last_by_default_and_contiguous_on_request(shape,
                                                                              architecture):
    spec = ObservationSpec(shape, "uint8")
    last = ImageEncoder(spec, architecture=architecture)
    plain = ImageEncoder(spec, architecture=architecture, memory_format="contiguous")
    plain.load_state_dict(last.state_dict())  # the same weights in either layout
    convs = [m for m in last.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(m.weight.is_contiguous(memory_format=torch.channels_last)
                         for m in convs)
    # (a weight of one input channel is both; the later ones are not)
    assert not all(m.weight.is_contiguous() for m in convs)
    assert all(m.weight.is_contiguous() for m in plain.modules()
               if isinstance(m, torch.nn.Conv2d))
    frames = torch.randint(0, 256, (3,) + shape, dtype=torch.uint8)
    x = _conv_input_format(last, frames)
    assert x.dtype == torch.float32 and x.shape[0] == 3 and x.shape[1] == (
        1 if len(shape) == 2 else 4 if shape[0] == 4 or shape[-1] == 4 else 3)
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert x.shape[1] == 1 or not x.is_contiguous()
    assert _conv_input_format(plain, frames).is_contiguous()
    with torch.no_grad():
        torch.testing.assert_close(last(frames), plain(frames), rtol=1e-3, atol=1e-4)


def test_a_learner_keeps_its_convolutions_channels_last_through_training_and_loading():
    learner = PPOLearner(FRAME, 3, mini_batch_size=16, num_epochs=1, seed=1)
    conv = learner.model.encoder.convs[2]  # [32, 16, 3, 3]: 16 input channels
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (8, 4) + FRAME.shape).astype(np.uint8)  # [T, K, *O]
    batch = _frame_batch(frames, rng.integers(0, 3, (8, 4, 1)).astype(np.float32),
                         np.full((8, 4), -np.log(3), np.float32), np.zeros((8, 4), np.float32),
                         rng)
    before = conv.weight.detach().clone()
    learner.train(batch)
    assert not torch.equal(before, conv.weight)  # it trained
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    learner.load_state_dict(PPOLearner(FRAME, 3, seed=2).state_dict())
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)


def test_a_wrong_memory_format_is_refused_naming_the_setting():
    with pytest.raises(ValueError, match=r"ImageEncoder.memory_format must be one of "
                                         r"\('channels_last', 'contiguous'\), got 'nhwc'"):
        ImageEncoder(FRAME, memory_format="nhwc")


def test_the_nature_network_refuses_frames_too_small_for_it():
    with pytest.raises(ValueError, match=r"'nature' needs frames of at least 36x36 pixels, "
                                         r"got 9x9; use 'small' or 'impala'"):
        ImageEncoder(FRAME, architecture="nature")


def test_separate_encoders_for_actor_and_value():
    import gin

    gin.bind_parameter("ActorCritic.shared_encoder", False)
    try:
        learner = PPOLearner(FRAME, 3)
    finally:
        gin.clear_config()
    names = set(learner.model.state_dict())
    assert any(n.startswith("actor_encoder.") for n in names)
    assert any(n.startswith("value_encoder.") for n in names)
    assert not any(n.startswith("encoder.") for n in names)


def _train(args, cwd):
    return subprocess.run([sys.executable, "-m", "alf_async.bin.train", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _refused_here(root, gin_files, params, capsys, **options):
    """(exit status, stderr) of the train command's body run in this process,
    for runs refused before anything starts."""
    rc = train_in_this_process(str(root), gin_files, params, **options)
    return rc, capsys.readouterr().err


@pytest.fixture(scope="module")
def dot_run(tmp_path_factory):
    """The shipped image config trained by the train command for 12k env steps,
    evaluated (deterministic episodes in the evaluator process) every 6k."""
    root = str(tmp_path_factory.mktemp("pixels") / "run")
    result = _train([f"--gin_file={DOT_CONFIG}", f"--root_dir={root}",
                     "--gin_param=Trainer.num_env_steps=12288",
                     "--gin_param=Trainer.eval_interval_env_steps=6144",
                     "--gin_param=Trainer.eval_episodes=4",
                     "--gin_param=MetricsRecorder.tensorboard=False"], REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def _rows(root):
    with open(os.path.join(root, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_a_conv_policy_learns_the_image_env(dot_run):
    rows = _rows(dot_run)
    first = next(r["episode_return"] for r in rows if r["episode_return"] is not None)
    assert first < 6  # about 2-3 for the first, nearly random policy
    assert rows[-1]["episode_return"] >= 12, [r["episode_return"] for r in rows]
    # The evaluator ran the conv policy on frames too.
    evaluations = [json.loads(line) for line in open(os.path.join(dot_run, "eval.jsonl"))]
    assert [e["env_steps"] for e in evaluations][-1] >= 12288
    assert evaluations[-1]["eval_return"] >= 12, evaluations


def test_a_conv_policy_checkpoint_round_trip(dot_run):
    from alf_async.playback.player import load_policy

    policy, _, _ = load_policy(dot_run, None)  # the newest checkpoint, deterministic
    frames = np.zeros((2, 9, 9, 1), np.uint8)
    frames[0, 4, 1, 0] = 255  # dot left of the middle: move right (2)
    frames[1, 4, 7, 0] = 255  # right of it: move left (0)
    action, _, _ = policy.act(frames)
    assert action[:, 0].tolist() == [2.0, 0.0]


def _learner_in(memory_format: str, seed: int) -> PPOLearner:
    """A learner of FRAME's conv net whose encoder computes in ``memory_format``."""
    import gin

    gin.bind_parameter("ImageEncoder.memory_format", memory_format)
    try:
        return PPOLearner(FRAME, 3, seed=seed)
    finally:
        gin.clear_config()


@pytest.mark.parametrize("saved,loaded", [("channels_last", "channels_last"),
                                          ("channels_last", "contiguous"),
                                          ("contiguous", "channels_last")])
def test_a_conv_learner_saved_and_loaded_gives_the_same_outputs(tmp_path, saved, loaded):
    """Bit for bit in one memory format; across formats (checkpoints load
    under either) to float32 rounding."""
    from alf_async.checkpoint import Checkpointer

    learner = _learner_in(saved, seed=1)
    frames = torch.randint(0, 256, (5,) + FRAME.shape, dtype=torch.uint8)
    actions = torch.randint(0, 3, (5, 1))
    with torch.no_grad():
        before = learner.model.log_prob_and_value(frames, actions)
    Checkpointer(str(tmp_path)).save({"learner": learner.state_dict()}, 1)
    state, _ = Checkpointer(str(tmp_path)).load_latest()  # weights_only
    restored = _learner_in(loaded, seed=2)  # other initial weights
    restored.load_state_dict(state["learner"])
    conv = restored.model.encoder.convs[2].weight  # [32, 16, 3, 3]: 16 input channels
    assert conv.is_contiguous(memory_format=torch.channels_last) == (loaded == "channels_last")
    with torch.no_grad():
        after = restored.model.log_prob_and_value(frames, actions)
    tolerance = {"rtol": 0, "atol": 0} if saved == loaded else {"rtol": 1e-3, "atol": 1e-4}
    for a, b in zip(before, after):
        torch.testing.assert_close(a, b, **tolerance)


def test_play_records_the_envs_frames_for_an_image_run(dot_run, tmp_path):
    gif = str(tmp_path / "dot.gif")
    result = subprocess.run([sys.executable, "-m", "alf_async.bin.play",
                             f"--root_dir={dot_run}", "--num_episodes=1",
                             f"--record_file={gif}"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=200)
    assert result.returncode == 0, result.stderr[-3000:]
    from PIL import Image

    with Image.open(gif) as image:
        assert image.size == (144, 144)  # the env's rendering, not the 9 x 9 input
        assert image.n_frames == 17  # after reset and after each of 16 steps


def test_an_image_run_that_cannot_fit_is_refused_naming_the_setting(tmp_path, capsys):
    # 100k steps x 8 envs: 82 MB with frames of 81 bytes, over 0.05 GiB.
    rc, err = _refused_here(tmp_path / "run", [DOT_CONFIG],
                            ["Trainer.unroll_length=100000",
                             "Trainer.max_trajectory_memory_gb=0.05"], capsys)
    assert rc == 2, err[-3000:]
    assert "Trainer.max_trajectory_memory_gb=0.05" in err and "9x9x1 uint8" in err
    assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")
    # Counted at a byte a pixel, it would fit in 0.1 GiB; as float32 (277 MB) not.
    as_floats = ObservationSpec(FRAME.shape, "float32")
    assert (trajectory_nbytes(100_000, 8, FRAME, 1) < 0.1 * 2 ** 30
            < trajectory_nbytes(100_000, 8, as_floats, 1))


def test_an_image_replay_buffer_that_cannot_fit_is_refused_naming_the_setting(tmp_path,
                                                                              capsys):
    # 10M transitions with two 81-byte frames each: 1.67 GiB, over 1 GiB (float32: 6.19).
    rc, err = _refused_here(tmp_path / "run", ["sac_image_dot_centering.gin"],
                            ["Replay.capacity=10000000", "Replay.max_replay_memory_gb=1.0"],
                            capsys)
    assert rc == 2, err[-3000:]
    assert "Replay.capacity=10000000" in err and "9x9x1 uint8" in err
    assert "would need 1.67 GiB" in err  # counted at a byte a pixel
    assert not os.path.exists(tmp_path / "run" / "metrics.jsonl")


def test_sac_networks_take_uint8_frames_through_their_encoders():
    from alf_async.algorithms.sac_learner import SACLearner
    from alf_async.algorithms.sac_policy import SACPolicy

    learner = SACLearner(FRAME, 1, batch_size=8, seed=0)
    names = set(learner.actor.state_dict()) | {f"critic.{n}" for n in learner.critic.state_dict()}
    assert any(n.startswith("encoder.") for n in names)  # the policy's own encoder
    assert any(n.startswith("critic.encoder.") for n in names)  # one for both Q networks
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (2, 8, 9, 9, 1), dtype=np.uint8)
    batch = {"observation": frames[0], "next_observation": frames[1],
             "action": rng.uniform(-1, 1, (8, 1)).astype(np.float32),
             "reward": np.ones(8, np.float32), "terminated": np.zeros(8, bool)}
    before = {k: v.clone() for k, v in learner.critic.encoder.state_dict().items()}
    actor_encoder = {k: v.clone() for k, v in learner.actor.encoder.state_dict().items()}
    stats = learner.train_step(batch)
    assert all(np.isfinite(v) for v in stats.values())
    # Each loss trains its own encoder: the critic's moved with the critic
    # loss, the actor's with the actor loss.
    assert any(not torch.equal(before[k], v)
               for k, v in learner.critic.encoder.state_dict().items())
    assert any(not torch.equal(actor_encoder[k], v)
               for k, v in learner.actor.encoder.state_dict().items())
    from alf_async.runtime.replay_buffer import replay_specs

    specs = replay_specs(16, FRAME, 1)  # the buffer keeps the frames as bytes
    assert specs["observation"].shape == (16, 9, 9, 1)
    assert str(np.dtype(specs["next_observation"].dtype)) == "uint8"
    policy = SACPolicy(FRAME, 1, deterministic=True)
    policy.load_weights(learner.weight_arrays())
    action, _, _ = policy.act(frames[0, :3])
    assert action.shape == (3, 1) and np.all(np.abs(action) <= 1)


@pytest.fixture(scope="module")
def sac_dot_run(tmp_path_factory):
    """The shipped SAC image config trained by the train command (4k env steps)."""
    root = str(tmp_path_factory.mktemp("sac_pixels") / "run")
    result = _train(["--gin_file=sac_image_dot_centering.gin", f"--root_dir={root}",
                     "--gin_param=Trainer.num_env_steps=4000",
                     "--gin_param=MetricsRecorder.tensorboard=False"], REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return root


# Its fixture's 4k-step SAC run: about 95 s on a quiet 2-core machine, 210 s
# beside a long training run (the timeout counts the fixture's set-up). Slow:
# the SAC image config's learning (the faster SAC pixel tests here check its
# uint8 replay and its Hogwild workers on frames).
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sac_learns_the_image_env_from_uint8_replay(sac_dot_run):
    rows = _rows(sac_dot_run)
    returns = [r["episode_return"] for r in rows if r["episode_return"] is not None]
    assert returns[0] < 6  # random actions until learning starts: about 2-3
    assert returns[-1] >= 12, returns
    from alf_async.playback.player import load_policy

    policy, _, _ = load_policy(sac_dot_run, None)  # the newest checkpoint, deterministic
    frames = np.zeros((2, 9, 9, 1), np.uint8)
    frames[0, 4, 1, 0] = 255  # dot left of the middle: move right (action > 1/3)
    frames[1, 4, 7, 0] = 255  # right of it: move left (action < -1/3)
    action, _, _ = policy.act(frames)
    assert action[0, 0] > 1 / 3 and action[1, 0] < -1 / 3, action


@pytest.mark.skipif(not ale_installed(), reason="ale-py (the atari extra) is not installed")
def test_atari_ids_get_the_standard_preprocessing():
    env = make_env("ALE/Pong-v5", render_mode="rgb_array")
    try:
        assert env.observation_spec == ObservationSpec((4, 84, 84), "uint8")
        obs = env.reset(seed=0)
        assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
        assert env.render().shape == (210, 160, 3)  # the game's own frames for videos
        assert env.action_spec.nvec == (6,)
    finally:
        env.close()


@pytest.mark.skipif(not ale_installed(), reason="ale-py (the atari extra) is not installed")
def test_the_pong_config_trains_a_few_iterations(tmp_path):
    # Its async twin differs only in num_actors (tests/test_gin_configs.py).
    root = tmp_path / "pong"
    result = _train(["--gin_file=ppo_atari_pong.gin", f"--root_dir={root}",
                     "--gin_param=Trainer.num_env_steps=0", "--gin_param=Trainer.num_iterations=2",
                     "--gin_param=Trainer.num_envs=2", "--gin_param=Trainer.unroll_length=8",
                     "--gin_param=PPOLearner.mini_batch_size=8",
                     "--gin_param=PPOLearner.num_epochs=1",
                     "--gin_param=MetricsRecorder.tensorboard=False"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _rows(root)[-1]["iteration"] == 2
    assert "A.L.E" not in result.stderr  # ale-py's banner is kept off the console
    # Its video: the game's frames, one an env step of 4 game frames, in real
    # time (the overlay's step count keeps GIF writers from merging frames).
    gif = str(tmp_path / "pong.gif")
    played = subprocess.run([sys.executable, "-m", "alf_async.bin.play", f"--root_dir={root}",
                             "--num_episodes=1", "--max_steps=3",
                             f"--record_file={gif}"], cwd=REPO_ROOT, capture_output=True,
                            text=True, timeout=200)
    assert played.returncode == 0, played.stderr[-3000:]
    from PIL import Image

    with Image.open(gif) as image:
        assert image.size == (160, 210) and image.n_frames == 4
        # GIF keeps centiseconds: 1000 / 15 ms is stored as 60 or 70 (30 fps: 30 or 40)
        assert image.info["duration"] == pytest.approx(1000 / 15, abs=10)


def test_a_checkpoint_that_does_not_fit_the_networks_is_refused_naming_it(dot_run, tmp_path,
                                                                          capsys):
    # As a run checkpointed before image support (flattened frames through an
    # MLP) would be: the networks of the resumed run do not match.
    import shutil

    run = tmp_path / "run"
    shutil.copytree(dot_run, run)
    params = ["ImageEncoder.architecture='impala'", "Trainer.num_env_steps=20000"]
    # The resume check names the changed network setting first ...
    rc, err = _refused_here(run, [], params, capsys)
    assert rc == 2, err[-3000:]
    assert "ImageEncoder.architecture: 'small' -> 'impala'" in err, err[-3000:]
    # ... and a resume that allows the change is refused by the checkpoint.
    rc, err = _refused_here(run, [], params, capsys, allow_config_change=True)
    assert rc == 2, err[-3000:]
    assert "Traceback" not in err
    assert "does not fit this run's networks" in err
    assert "ckpt-" in err and "--root_dir alone" in err


def test_hogwild_workers_train_the_conv_policy_on_frames(tmp_path):
    root = tmp_path / "run"
    result = _train([f"--gin_file={DOT_CONFIG}", f"--root_dir={root}",
                     "--gin_param=Trainer.runtime='hogwild'", "--gin_param=Trainer.num_actors=2",
                     "--gin_param=Trainer.num_env_steps=4096",
                     "--gin_param=MetricsRecorder.tensorboard=False"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _rows(root)
    assert rows[-1]["env_steps"] >= 4096
    # A random policy scores about 3 (image_envs.py); the workers' shared conv
    # policy has learned past it (9 to 10 here, from 2 at the start).
    assert rows[-1]["episode_return"] >= 6, [r["episode_return"] for r in rows]


def test_hogwild_sac_workers_train_on_frames_from_their_uint8_replay(tmp_path):
    # Two Hogwild workers, each with its own uint8 replay buffer and conv
    # encoders over the one set of shared networks: past learning_starts both
    # take gradient steps, and the run's checkpoint plays as a SAC policy.
    root = tmp_path / "run"
    result = _train(["--gin_file=sac_image_dot_centering.gin", f"--root_dir={root}",
                     "--gin_param=Trainer.runtime='hogwild'", "--gin_param=Trainer.num_actors=2",
                     "--gin_param=Hogwild.mode='shared'",
                     "--gin_param=Replay.learning_starts=256",
                     "--gin_param=Trainer.num_env_steps=512",
                     "--gin_param=MetricsRecorder.tensorboard=False"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = _rows(root)
    assert rows[-1]["env_steps"] >= 512
    trained = [r for r in rows if r.get("worker_gradient_steps")]
    assert {r["actor_id"] for r in trained} == {0, 1}, rows[-2:]
    assert all(np.isfinite(r["critic_loss"]) for r in trained)
    from alf_async.playback.player import load_policy

    policy, _, _ = load_policy(str(root), None)
    action, _, _ = policy.act(np.zeros((2, 9, 9, 1), np.uint8))
    assert action.shape == (2, 1) and np.all(np.abs(action) <= 1)
