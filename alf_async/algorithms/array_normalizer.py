"""Observation normalization as the actors apply it, in numpy.

``RunningNormalizer.normalize_array`` (the actors' numpy inference) and the
acting env workers' ``ActingPolicy`` both normalize with it; it imports no
torch, so an env worker that unpickles one stays torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ArrayNormalizer:
    """Observation normalization in float32 numpy: (x - mean) / std, clipped to
    [-clip, clip] (clip 0: not clipped). mean, std: [O] float32."""

    mean: np.ndarray
    std: np.ndarray
    clip: float

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = (x - self.mean) / self.std
        return np.clip(y, -self.clip, self.clip, out=y) if self.clip > 0 else y
