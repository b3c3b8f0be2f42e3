"""What Hogwild workers and their trainer say to each other (one pipe each).

Worker -> trainer: ``WorkerReady`` once its envs and learner are built,
``WorkerProgress`` after every iteration (one unroll of [T, K] and the updates
it paid for), ``WorkerState`` when asked (and with ``final=True`` when told to
stop), ``WorkerHeartbeat`` every few seconds during a long iteration,
``WorkerFailed`` with the traceback of an error.
Trainer -> worker: ``RunIteration`` (a grant: the budget needs one more
batch), ``SendState`` (at checkpoints), ``StopWorker``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple


@dataclass
class WorkerReady:
    worker_id: int
    generation: int
    pid: int
    env_worker_pids: List[int]


@dataclass
class WorkerProgress:
    """One worker iteration.

    Attributes:
        env_steps: T * K stepped in this iteration.
        gradient_steps: gradient steps taken in it (PPO: epochs x minibatches).
        worker_env_steps, worker_gradient_steps: this process's totals since it
            started (SAC gradient steps: plus those of its restored local
            state); the trainer keeps the run's per-worker totals.
        unroll_s, inference_s, env_s: the unroll's time split (seconds).
        train_s: seconds of the updates.
        syncs: syncs with the global networks so far.
        episodes: (return, length) of episodes that ended.
        env_failures: (env index, traceback) of envs recreated.
        stats: the learner's statistics, averaged over the iteration's updates.
    """

    worker_id: int
    generation: int
    env_steps: int
    gradient_steps: int
    worker_env_steps: int
    worker_gradient_steps: int
    unroll_s: float
    inference_s: float
    env_s: float
    train_s: float
    syncs: int
    episodes: List[Tuple[float, int]] = field(default_factory=list)
    env_failures: List[Tuple[int, str]] = field(default_factory=list)
    stats: Dict[str, float] = field(default_factory=dict)


@dataclass
class WorkerState:
    """The worker's local learner state (``local_state()``, ``torch.save``d to
    bytes: it holds tensors, and bytes need no shared memory in transit)."""

    worker_id: int
    generation: int
    state: bytes
    final: bool = False


@dataclass
class WorkerHeartbeat:
    """The worker is busy and alive (sent during unrolls and training)."""

    worker_id: int
    generation: int


@dataclass
class WorkerFailed:
    """The worker died of an exception. ``env_error``: an env failed and
    ``Trainer.fatal_env_errors`` made it fatal (no restart)."""

    worker_id: int
    generation: int
    traceback: str
    ready: bool
    env_error: bool = False


@dataclass
class RunIteration:
    """Run one iteration and report its ``WorkerProgress``.

    Attributes:
        progress: the run's progress (0..1, ``TrainerSettings.progress``)
            counting the batches granted before this one, in flight or done:
            where PPO's learning-rate schedule (and an annealed clip range)
            stands for this batch; None: the schedule's start.
    """

    progress: Optional[float] = None


@dataclass
class SendState:
    """Ask a worker for its ``WorkerState`` (answered after its iteration)."""


@dataclass
class StopWorker:
    """Finish the iteration, answer with a final ``WorkerState``, exit."""
