"""Recurrent cores: an LSTM or GRU cell between the encoder and the heads.

A core turns the features of one step [B, F] and the state it carried [B, S]
into its output [B, H] and the next state [B, S]. The state is one flat
float32 row per env so that actors, trajectory slots and the learner handle
every kind of core alike:

- "lstm": S = 2 H, the hidden state h then the cell state c;
- "gru": S = H, the hidden state.

The core computes in float32 under any autocast (``utils.precision``): its
state rows are float32, and bf16 rounding fed back through T steps would
make an actor's step-by-step pass and the learner's fused re-run drift
apart; its features arrive in the encoder's precision and are cast.

A zero row is the state an episode starts with. ``run_sequence`` re-runs a
whole [T, B] sequence from given start states, resetting a row to zero before
every step that begins an episode (truncated backpropagation through time over
the sequence).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn

from alf_async.utils.devices import to_device
from alf_async.utils.precision import float32_context

RNN_KINDS = ("lstm", "gru")


class RecurrentCore(nn.Module):
    """One LSTM or GRU layer of ``hidden_size`` H over features of ``input_size`` F.

    Args:
        kind: "lstm" or "gru".
        input_size: F.
        hidden_size: H (the output width).
    """

    def __init__(self, kind: str, input_size: int, hidden_size: int):
        super().__init__()
        if kind not in RNN_KINDS:
            raise ValueError(f"rnn must be one of {list(RNN_KINDS)} or None, got {kind!r}")
        if int(hidden_size) < 1:
            raise ValueError(f"rnn_size must be >= 1, got {hidden_size}")
        self.kind = kind
        self.hidden_size = int(hidden_size)
        layer = nn.LSTM if kind == "lstm" else nn.GRU
        self.rnn = layer(int(input_size), self.hidden_size)
        # Orthogonal recurrent weights per gate and zero biases (the usual PPO
        # choice); an LSTM's forget gate starts open (bias 1) so memory is kept.
        for name, weight in self.rnn.named_parameters():
            if name.startswith("weight_hh"):
                for gate in weight.split(self.hidden_size, dim=0):
                    nn.init.orthogonal_(gate)
            elif name.startswith("bias"):
                nn.init.zeros_(weight)
        if kind == "lstm":
            with torch.no_grad():
                self.rnn.bias_hh_l0[self.hidden_size:2 * self.hidden_size].fill_(1.0)

    @property
    def state_size(self) -> int:
        """S: the width of one env's state row."""
        return 2 * self.hidden_size if self.kind == "lstm" else self.hidden_size

    def _run(self, features: torch.Tensor, state: torch.Tensor
             ) -> Tuple[torch.Tensor, torch.Tensor]:
        """features [T, B, F] from state [B, S] without resets -> (outputs
        [T, B, H], the state after the last step [B, S])."""
        with float32_context(features):
            return self._run_float32(features.float(), state.float())

    def _run_float32(self, features: torch.Tensor, state: torch.Tensor
                     ) -> Tuple[torch.Tensor, torch.Tensor]:
        if self.kind == "lstm":
            out, (h, c) = self.rnn(features, (state[None, :, :self.hidden_size].contiguous(),
                                              state[None, :, self.hidden_size:].contiguous()))
            return out, torch.cat([h[0], c[0]], dim=-1)
        out, h = self.rnn(features, state[None].contiguous())
        return out, h[0]

    def forward(self, features: torch.Tensor, state: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        """One step: features [B, F], state [B, S] -> (output [B, H], next
        state [B, S]). (The layer's own cell function on its weights: a third
        of the fused layer's call overhead for a single step.)"""
        with float32_context(features):
            return self._step_float32(features.float(), state.float())

    def _step_float32(self, features: torch.Tensor, state: torch.Tensor
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
        r, H = self.rnn, self.hidden_size
        weights = (r.weight_ih_l0, r.weight_hh_l0, r.bias_ih_l0, r.bias_hh_l0)
        if self.kind == "lstm":
            h, c = torch.lstm_cell(features, (state[:, :H], state[:, H:]), *weights)
            return h, torch.cat([h, c], dim=-1)
        h = torch.gru_cell(features, state, *weights)
        return h, h

    def run_sequence(self, features: torch.Tensor, state: torch.Tensor,
                     episode_start: Optional[torch.Tensor], keep_every: int = 0
                     ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """Re-run a sequence.

        The steps run in stretches without resets through the fused layer
        (several times faster on a CPU than a step at a time); between
        stretches the rows that begin an episode are zeroed.

        Where the stretches end depends on the data: give ``episode_start``
        on the host (a CPU tensor) when the network is on a GPU, so that
        reading them waits for nothing (it is copied to the device once, for
        the resets); on the device it costs one read back.

        Args:
            features: [T, B, F].
            state: [B, S], the state each row started the sequence with.
            episode_start: [T, B] bool, a new episode begins at step t (the
                state is zeroed before the step); None: no resets.
            keep_every: L > 0: also return the state steps 0, L, 2L, ... started
                from (after the reset), [T / L, B, S].
        Returns:
            (outputs [T, B, H], the kept states or None).
        """
        T = features.shape[0]
        cuts = set(range(keep_every, T, keep_every)) if keep_every else set()
        if episode_start is not None:
            cuts.update((torch.nonzero(episode_start[1:].any(dim=1)).flatten() + 1).tolist())
            episode_start = to_device(episode_start, state.device)
        bounds = [0] + sorted(cuts) + [T]
        outputs, kept = [], []
        for first, end in zip(bounds[:-1], bounds[1:]):
            if episode_start is not None:
                state = state * (~episode_start[first]).unsqueeze(-1).to(state.dtype)
            if keep_every and first % keep_every == 0:
                kept.append(state)
            out, state = self._run(features[first:end], state)
            outputs.append(out)
        return torch.cat(outputs), (torch.stack(kept) if keep_every else None)
