"""What a ``BatchedEnv`` and its env-worker processes exchange: the arrays of
their shared-memory block and the wire format of their pipes.

Shared memory: one block holds the arrays of ``batch_specs`` for all K envs.
The batch writes ``action``; the worker of env k writes its ``observation``,
``final_observation``, ``reward``, ``terminated``, ``truncated`` and
``env_failed``. The pipes carry only commands and short replies.

Pipes: the batch sends a request (``EnvCommand``, args); the worker answers each
request but ``CLOSE`` with one reply when it has carried it out, and also sends
one reply when its envs are built (or failed to build). A step, the only
per-step traffic, goes as raw bytes: the request b"s" (every env) or b"s" +
bytes([s, S]) (split s of S), and the reply b"k" when no env failed; this spares
each step two pickles and an enum lookup. Every other message is a pickled
(command, args) request or a pickled ("ok", failures) / ("error", EnvError)
reply (a pickle never starts with these tags: it starts with its protocol byte,
0x80). failures is a list of (env index, traceback) pairs.

Shapes: K = num_envs, O = the observation's shape (``ObservationSpec``), A = action_dim.
"""

from __future__ import annotations

import enum
import pickle
from typing import Dict, List, Tuple, Union

from alf_async.envs.spaces import ObservationSpec, as_observation_spec
from alf_async.utils.shared_memory import ArraySpec


def batch_specs(num_envs: int, observation: Union[ObservationSpec, int],
                action_dim: int) -> Dict[str, ArraySpec]:
    """Specs of the arrays a BatchedEnv shares with its workers (observations in
    their own shape and dtype: [K, *shape])."""
    obs = as_observation_spec(observation)
    return {
        "observation": ArraySpec((num_envs,) + obs.shape, obs.dtype),
        "final_observation": ArraySpec((num_envs,) + obs.shape, obs.dtype),
        "action": ArraySpec((num_envs, action_dim), "float32"),
        "reward": ArraySpec((num_envs,), "float32"),
        "terminated": ArraySpec((num_envs,), "bool"),
        "truncated": ArraySpec((num_envs,), "bool"),
        "env_failed": ArraySpec((num_envs,), "bool"),
        # terminated by a lost life while the game goes on (EpisodicLife)
        "life_lost": ArraySpec((num_envs,), "bool"),
    }


class EnvCommand(enum.Enum):
    """What the batched env asks of an env worker (or of its in-process group)."""

    STEP = "step"  # (): step every env; ((s, S),): the envs of split s of S
    RESET = "reset"  # reset every env with its seed
    SET_SEED = "set_seed"  # (seed,): new base seed, then reset
    CLOSE = "close"  # end the worker
    # Acting env workers (``envs.acting_workers``): the worker unrolls its envs.
    ACT_SETUP = "act_setup"  # (rollout block name, specs, [(stream, split)], policy)
    ACT_WEIGHTS = "act_weights"  # (weights,): the policy's new weights
    ACT_RESEED = "act_reseed"  # (seed,): restart the policy's sampling streams
    ACT_UNROLL = "act_unroll"  # (t0, t1): act and step rows t0 .. t1 - 1


# The tags of the raw step messages (see the module docstring).
_STEP_REQUEST = b"s"
_OK_NO_FAILURES = b"k"


def encode_request(command: EnvCommand, args: Tuple = ()) -> bytes:
    """A worker request (command, args) as the bytes sent through its pipe."""
    if command is EnvCommand.STEP:
        if not args:
            return _STEP_REQUEST
        (split, num_splits), = args
        if 0 <= split < num_splits < 256:
            return _STEP_REQUEST + bytes((split, num_splits))
    return pickle.dumps((command, args), protocol=pickle.HIGHEST_PROTOCOL)


def decode_request(data: bytes) -> Tuple[EnvCommand, Tuple]:
    """The inverse of ``encode_request``."""
    if data[:1] == _STEP_REQUEST:
        return EnvCommand.STEP, (((data[1], data[2]),) if len(data) == 3 else ())
    return pickle.loads(data)


def encode_reply(failures: List[Tuple[int, str]]) -> bytes:
    """A worker's answer to a request it carried out, with the env failures it met."""
    if not failures:
        return _OK_NO_FAILURES
    return pickle.dumps(("ok", failures), protocol=pickle.HIGHEST_PROTOCOL)


def decode_reply(data: bytes) -> Tuple[str, object]:
    """("ok", failures) or ("error", EnvError) from a reply's bytes."""
    if data == _OK_NO_FAILURES:
        return "ok", []
    return pickle.loads(data)
