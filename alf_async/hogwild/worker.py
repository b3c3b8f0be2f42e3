"""A Hogwild worker process: its own K envs, its own learner step and optimizer,
the run's one set of networks.

Each iteration: load the (shared or synced) networks into the acting policy,
unroll [T, K] on the worker's envs (``runtime.actor.Actor``, as an actor does),
then train:

- PPO: one ``PPOLearner.train`` on the batch (``num_epochs`` x minibatches of
  gradient steps) at the run's progress the grant carries (for the learning-rate
  schedule and an annealed clip range), one update;
- SAC: copy the batch into the worker's own replay buffer and take the
  gradient steps the new env steps pay for at ``Replay.env_steps_per_gradient_step``
  (after the worker's share of ``Replay.learning_starts``), one update each.

then report a ``WorkerProgress``. The worker runs an iteration when the
trainer grants one (``RunIteration``: the trainer hands out only the batches
the budget needs), sends a ``WorkerHeartbeat`` every
``runtime.messages.HEARTBEAT_INTERVAL_S`` (2 s, as actors do) while it runs
one, and answers ``SendState`` / ``StopWorker`` between them (a "synced" worker
syncs before its final state, so no update is lost at the end). It stops when
told to or when its trainer dies; on an error it reports ``WorkerFailed`` and
exits with 1.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import numpy as np

from alf_async.envs.spaces import ObservationSpec
from alf_async.hogwild import messages
from alf_async.hogwild.shared_state import GlobalState
from alf_async.runtime.messages import HEARTBEAT_INTERVAL_S
from alf_async.settings import HogwildSettings, ReplaySettings, TrainerSettings
from alf_async.utils.seeding import derive_seed
from alf_async.utils.process import started_by


@dataclass
class WorkerLaunch:
    """Everything a worker process is started with (picklable for spawn).

    Attributes:
        worker_id: w in [0, N); seeds its envs and sampling like actor w.
        generation: how many times worker w was restarted.
        epoch: iteration of the checkpoint the run resumed from (seeding).
        settings, replay, hogwild: the run's settings (replay: SAC only).
        gin_config: the run's gin bindings (learner, networks).
        state: the global networks.
        local_state: the worker's saved ``local_state()`` (torch.save bytes), or None.
        parent_pid: the trainer's pid (the worker exits if it is gone).
    """

    worker_id: int
    generation: int
    epoch: int
    settings: TrainerSettings
    replay: Optional[ReplaySettings]
    hogwild: HogwildSettings
    gin_config: str
    state: GlobalState
    local_state: Optional[bytes]
    parent_pid: int


def to_bytes(obj: Any) -> bytes:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def from_bytes(data: bytes) -> Any:
    """The object of ``to_bytes`` (tensors and plain values only), its
    tensors on the CPU whatever device they were saved from."""
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _raise_system_exit(signum, frame):
    raise SystemExit(128 + signum)


class _Worker:
    """The worker's envs, learner and training step (inside its process)."""

    def __init__(self, launch: WorkerLaunch):
        import gin
        import torch

        from alf_async.config import gin_imports
        from alf_async.runtime.actor import Actor
        from alf_async.runtime.trajectory import allocate_trajectory

        s = launch.settings
        self.launch, self.settings = launch, s
        torch.set_num_threads(max(1, s.learner_num_threads))
        env_modules = gin_imports(launch.gin_config)
        self.sac = s.off_policy
        if self.sac:
            from alf_async.algorithms.sac_learner import SACLearner as learner_cls
            from alf_async.algorithms.sac_policy import SACPolicy as policy_cls
        else:
            from alf_async.algorithms.policy import NeuralPolicy as policy_cls
            from alf_async.algorithms.ppo_learner import PPOLearner as learner_cls
        for module in env_modules:
            __import__(module)
        gin.parse_config(launch.gin_config, skip_unknown=True)
        w, epoch, gen = launch.worker_id, launch.epoch, launch.generation
        self.actor = Actor(w, s, policy_cls, epoch, gen, env_modules=env_modules)
        self.buffer = None
        try:
            env = self.actor.env
            self.learner = learner_cls(env.observation_spec, env.action_spec,
                                       seed=derive_seed(s.seed, w, epoch, gen, 4))
            from alf_async.hogwild.shared_state import WorkerBinding

            self.binding = WorkerBinding(launch.state, self.learner, launch.hogwild.mode,
                                         launch.hogwild.sync_interval)
            if launch.local_state is not None:
                self.learner.load_local_state(from_bytes(launch.local_state))
            self.trajectory = allocate_trajectory(s.unroll_length, s.num_envs,
                                                  env.observation_spec, env.action_spec.dim,
                                                  next_observation=self.sac,
                                                  state_size=self.actor.state_size)
            self.env_steps = 0
            self.gradient_steps = int(getattr(self.learner, "gradient_steps", 0))
            if self.sac:
                self._init_replay(env.observation_spec, env.action_spec.dim)
        except BaseException:
            self.close()
            raise

    def _init_replay(self, observation: ObservationSpec, action_dim: int) -> None:
        from alf_async.runtime.replay_buffer import ReplayBuffer
        from alf_async.runtime.step_ratio import StepRatio

        r, s = self.launch.replay, self.settings
        self.buffer = ReplayBuffer.create(r.capacity, observation, action_dim)
        # The run collects Replay.learning_starts steps in all before training:
        # each of the N workers its share.
        starts = -(-r.learning_starts // s.num_actors)
        self.ratio = StepRatio(r.env_steps_per_gradient_step, starts, s.steps_per_batch,
                               0, self.gradient_steps)
        self.rng = np.random.default_rng(derive_seed(
            s.seed, self.launch.worker_id, self.launch.epoch, self.launch.generation, 3))

    def iteration(self, heartbeat: Callable[[], None],
                  progress: Optional[float] = None) -> messages.WorkerProgress:
        """Unroll once and train on it (``heartbeat`` is called during both);
        ``progress``: the run's share of the budget granted before this batch
        (``RunIteration.progress``), for PPO's learning-rate schedule."""
        learner, actor = self.learner, self.actor
        actor.load_weights(self.binding.updates, learner.weight_arrays())
        record = actor.unroll(self.trajectory, on_step=heartbeat)
        heartbeat()
        self.env_steps += record.env_steps
        train_start = time.perf_counter()
        if self.sac:
            steps, stats = self._train_sac(heartbeat)
        else:
            stats = learner.train(self.trajectory, progress=progress)
            steps = int(stats.get("gradient_steps", 0))
            self.gradient_steps += steps
            self.binding.after_update(1)
        train_s = time.perf_counter() - train_start
        return messages.WorkerProgress(
            self.launch.worker_id, self.launch.generation, record.env_steps, steps,
            self.env_steps, self.gradient_steps, record.unroll_s, record.inference_s,
            record.env_s, train_s, self.binding.syncs, record.episodes,
            [(k, text[-4000:]) for k, text in record.env_failures], stats)

    def _train_sac(self, heartbeat: Callable[[], None]):
        learner, buffer = self.learner, self.buffer
        buffer.add_trajectory(self.trajectory, gradient_step=learner.gradient_steps)
        due = self.ratio.gradient_steps_due(self.env_steps, learner.gradient_steps)
        totals: Dict[str, float] = {}
        for _ in range(due):
            out = learner.train_step(buffer.sample(learner.batch_size, self.rng))
            for k, v in out.items():
                totals[k] = totals.get(k, 0.0) + v
            self.binding.after_update(1)
            heartbeat()
        self.gradient_steps = learner.gradient_steps
        return due, {k: v / due for k, v in totals.items()} if due else {}

    def local_state(self, final: bool = False) -> messages.WorkerState:
        if final and self.binding.mode == "synced":
            self.binding.sync()  # push the updates since the last sync
        return messages.WorkerState(self.launch.worker_id, self.launch.generation,
                                    to_bytes(self.learner.local_state()), final)

    def close(self) -> None:
        for resource in (self.buffer, self.actor):
            if resource is not None:
                try:
                    resource.close()
                except Exception:  # noqa: BLE001 - closing on the way out
                    pass
        self.buffer = self.actor = None


def _serve(conn, worker: _Worker, parent_pid: int) -> None:
    """Answer the trainer's commands until told to stop (or the trainer is gone)."""
    w, gen = worker.launch.worker_id, worker.launch.generation
    last = [time.monotonic()]

    def heartbeat() -> None:
        now = time.monotonic()
        if now - last[0] >= HEARTBEAT_INTERVAL_S:
            last[0] = now
            conn.send(messages.WorkerHeartbeat(w, gen))

    while True:
        if not conn.poll(1.0):
            if not started_by(parent_pid):
                return
            continue
        command = conn.recv()
        if isinstance(command, messages.StopWorker):
            conn.send(worker.local_state(final=True))
            return
        if isinstance(command, messages.SendState):
            conn.send(worker.local_state())
        elif isinstance(command, messages.RunIteration):
            last[0] = time.monotonic()
            conn.send(worker.iteration(heartbeat, command.progress))


def worker_process_main(launch: WorkerLaunch, conn) -> None:
    """Entry point of a Hogwild worker process."""
    from alf_async.utils.process import HOGWILD_WORKER_PROCESS_NAME, init_child_process

    init_child_process(signal.SIGTERM, expected_parent=launch.parent_pid,
                       name=HOGWILD_WORKER_PROCESS_NAME)
    signal.signal(signal.SIGTERM, _raise_system_exit)
    w, gen = launch.worker_id, launch.generation
    worker: Optional[_Worker] = None
    try:
        worker = _Worker(launch)
        conn.send(messages.WorkerReady(w, gen, os.getpid(), worker.actor.env.worker_pids))
        _serve(conn, worker, launch.parent_pid)
    except (SystemExit, KeyboardInterrupt, EOFError, BrokenPipeError):
        pass
    except BaseException as e:  # report every failure with its traceback
        from alf_async.envs.env_errors import EnvError

        try:
            conn.send(messages.WorkerFailed(w, gen, traceback.format_exc(), worker is not None,
                                            isinstance(e, EnvError)))
        except (OSError, ValueError):
            print(traceback.format_exc(), file=sys.stderr)
        sys.exit(1)
    finally:
        if worker is not None:
            worker.close()
