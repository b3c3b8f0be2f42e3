"""How PPO cuts one [T, K] trajectory batch into minibatches.

A feed-forward network trains on single samples: minibatches are random sets
of the T * K samples. A recurrent network must see its samples in order, from
the state they were acted with: the batch is cut into M = (T / L) * K
*columns*, each L consecutive steps of one env (L = ``chunk_length``; L = T:
whole env sequences), and a minibatch is a random set of columns, re-run by the
network from the state its first step started with.

``BatchColumns`` holds that arrangement: ``columns(x)`` turns a per-step tensor
[T, K, ...] into [L, M, ...] (column j = chunk j // K of env j % K), and the
feed-forward case is L = 1, M = T * K, in the order of a flattened [T, K]
batch (sample t * K + k), so its minibatches are exactly the ones drawn before
recurrent networks existed.
"""

from __future__ import annotations

import torch


class BatchColumns:
    """The [L, M] column layout of a [T, K] batch.

    Args:
        unroll_length: T.
        num_envs: K.
        chunk_length: L, a divisor of T (1 for feed-forward networks).
    """

    def __init__(self, unroll_length: int, num_envs: int, chunk_length: int):
        if chunk_length < 1 or unroll_length % chunk_length:
            raise ValueError(f"the chunk length {chunk_length} must divide "
                             f"unroll_length={unroll_length}")
        self.T, self.K, self.L = unroll_length, num_envs, chunk_length
        self.num_chunks = unroll_length // chunk_length  # C
        self.num_columns = self.num_chunks * num_envs  # M

    def columns(self, x: torch.Tensor) -> torch.Tensor:
        """[T, K, ...] -> [L, M, ...]: step i of column c * K + k is step
        c * L + i of env k."""
        tail = tuple(x.shape[2:])
        if self.L == 1:
            return x.reshape((1, self.num_columns) + tail)
        return (x.reshape((self.num_chunks, self.L, self.K) + tail).transpose(0, 1)
                .reshape((self.L, self.num_columns) + tail))

    def start_states(self, states: torch.Tensor) -> torch.Tensor:
        """The state each column starts from [M, S], of the states [T / L, K, S]
        that steps 0, L, 2L, ... started from in a pass over the whole batch
        (``ActorCritic.sequence(..., keep_every=L)``)."""
        return states.reshape(self.num_columns, -1)

    def columns_per_minibatch(self, mini_batch_size: int) -> int:
        """Columns in a minibatch of about ``mini_batch_size`` samples (at
        least one column, at most all)."""
        return min(max(1, mini_batch_size // self.L), self.num_columns)

    @staticmethod
    def pick(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """The samples of columns ``index`` of x [L, M, ...], flattened to
        [L * len(index), ...] in time-major order (the order of the network's
        ``sequence`` outputs)."""
        picked = x[:, index]
        return picked.reshape((-1,) + tuple(picked.shape[2:]))
