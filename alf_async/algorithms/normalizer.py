"""Running mean and variance of observations, for observation normalization.

The learner owns one ``RunningNormalizer``, updates it with every training batch
and ships its statistics (``state_arrays()``) to the actors with the weights, so
that actors and learner normalize identically.

Statistics are exact over all data seen (Chan et al.'s parallel merge of
count/mean/M2 in float64), so after updating with batches x_1..x_n the mean and the
population variance equal ``numpy.mean`` / ``numpy.var`` of their concatenation.
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import gin
import numpy as np
import torch
import torch.nn as nn

from alf_async.algorithms.array_normalizer import ArrayNormalizer


@gin.configurable
class RunningNormalizer:
    """Normalizes vectors of size D with running statistics.

    Args:
        dim: D, the size of the normalized vectors.
        clip: normalized values are clipped to [-clip, clip] (0 disables clipping).
        epsilon: added to the variance before the square root.
    """

    def __init__(self, dim: int, clip: float = 10.0, epsilon: float = 1e-8):
        self.dim = dim
        self.clip = clip
        self.epsilon = epsilon
        self.count = 0.0
        self.mean = np.zeros(dim, np.float64)
        self.m2 = np.zeros(dim, np.float64)
        # (dtype, device) -> (mean, std) tensors, ("numpy", None) -> float32
        # arrays; cleared whenever the stats change.
        self._tensors: Dict[tuple, tuple] = {}

    @property
    def var(self) -> np.ndarray:
        """Population variance [D] of all data seen (0 before any data)."""
        return self.m2 / self.count if self.count > 0 else np.ones(self.dim)

    def update(self, x: np.ndarray) -> None:
        """Add a batch x [..., D] to the statistics."""
        x = np.asarray(x, np.float64).reshape(-1, self.dim)
        n = x.shape[0]
        if n == 0:
            return
        batch_mean = x.mean(axis=0)
        batch_m2 = ((x - batch_mean) ** 2).sum(axis=0)
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + batch_m2 + delta ** 2 * (self.count * n / total)
        self.count = total
        self._tensors = {}

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """(x - mean) / sqrt(var + eps), clipped; x [..., D] float32 tensor."""
        mean, std = self.statistics(x.dtype, x.device)
        return standardize(x, mean, std, self.clip)

    def statistics(self, dtype: torch.dtype = torch.float32,
                   device: Optional[torch.device] = None
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(mean [D], sqrt(var + eps) [D]) as tensors of ``dtype`` on ``device``."""
        key = (dtype, device)
        if key not in self._tensors:
            self._tensors[key] = (
                torch.as_tensor(self.mean, dtype=dtype, device=device),
                torch.as_tensor(np.sqrt(self.var + self.epsilon), dtype=dtype,
                                device=device))
        return self._tensors[key]

    def normalize_array(self, x: np.ndarray) -> np.ndarray:
        """``normalize`` for a float32 numpy array x [..., D] (the same float32
        arithmetic, without torch: the actors' numpy inference)."""
        return self.array_normalizer()(x)

    def array_normalizer(self) -> ArrayNormalizer:
        """The current statistics as a numpy normalizer (float32), picklable."""
        key = ("numpy", None)
        if key not in self._tensors:
            self._tensors[key] = ArrayNormalizer(
                self.mean.astype(np.float32),
                np.sqrt(self.var + self.epsilon).astype(np.float32), self.clip)
        return self._tensors[key]

    def state_arrays(self) -> Dict[str, np.ndarray]:
        """Statistics as arrays: count [1], mean [D], m2 [D] (float64)."""
        return {"count": np.array([self.count]), "mean": self.mean.copy(),
                "m2": self.m2.copy()}

    def load_state_arrays(self, state: Dict[str, np.ndarray]) -> None:
        self.count = float(np.asarray(state["count"]).reshape(-1)[0])
        self.mean = np.array(state["mean"], np.float64).reshape(self.dim)
        self.m2 = np.array(state["m2"], np.float64).reshape(self.dim)
        self._tensors = {}

    def state_dict(self) -> Dict[str, torch.Tensor]:
        return {k: torch.from_numpy(np.array(v)) for k, v in self.state_arrays().items()}

    def load_state_dict(self, state: Dict[str, torch.Tensor]) -> None:
        self.load_state_arrays({k: v.numpy() for k, v in state.items()})


def standardize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                clip: float) -> torch.Tensor:
    """(x - mean) / std for x [..., D], clipped to [-clip, clip] (clip 0: not clipped)."""
    y = (x - mean) / std
    return y.clamp(-clip, clip) if clip > 0 else y


class FrozenNormalizer(nn.Module):
    """A ``RunningNormalizer``'s statistics of one moment as float32 buffers:
    a module that normalizes x [..., D] as the normalizer did then (for
    exported policies, ``playback.export``)."""

    def __init__(self, normalizer: RunningNormalizer):
        super().__init__()
        mean, std = normalizer.statistics(torch.float32)
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", std.clone())
        self.clip = float(normalizer.clip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return standardize(x, self.mean, self.std, self.clip)


def merge_statistics(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]
                     ) -> Dict[str, np.ndarray]:
    """The statistics (``state_arrays()`` form: count [1], mean [D], m2 [D]) of
    the union of two disjoint data sets, from theirs."""
    na, nb = float(np.asarray(a["count"]).reshape(-1)[0]), float(
        np.asarray(b["count"]).reshape(-1)[0])
    total = na + nb
    if total <= 0:
        return {k: np.array(v, np.float64, copy=True) for k, v in a.items()}
    delta = np.asarray(b["mean"], np.float64) - np.asarray(a["mean"], np.float64)
    return {"count": np.array([total]),
            "mean": np.asarray(a["mean"], np.float64) + delta * (nb / total),
            "m2": (np.asarray(a["m2"], np.float64) + np.asarray(b["m2"], np.float64)
                   + delta ** 2 * (na * nb / total))}


def subtract_statistics(whole: Mapping[str, np.ndarray], part: Mapping[str, np.ndarray]
                        ) -> Dict[str, np.ndarray]:
    """The statistics of ``whole`` minus a subset ``part`` of its data (the
    inverse of ``merge_statistics``): what a Hogwild worker added to the
    statistics it last pulled."""
    n, na = float(np.asarray(whole["count"]).reshape(-1)[0]), float(
        np.asarray(part["count"]).reshape(-1)[0])
    nb = n - na
    dim = np.asarray(whole["mean"]).shape
    if nb <= 0:
        return {"count": np.array([0.0]), "mean": np.zeros(dim), "m2": np.zeros(dim)}
    mean_a, mean = np.asarray(part["mean"], np.float64), np.asarray(whole["mean"], np.float64)
    mean_b = (n * mean - na * mean_a) / nb
    delta = mean_b - mean_a
    m2_b = (np.asarray(whole["m2"], np.float64) - np.asarray(part["m2"], np.float64)
            - delta ** 2 * (na * nb / n))
    return {"count": np.array([nb]), "mean": mean_b, "m2": np.maximum(m2_b, 0.0)}


class PublishedStatistics:
    """The normalizer statistics published with each weight version (the
    newest ``keep`` versions) and the last ones published, so that a batch can
    be normalized as the version that acted on it did (``PPOLearner.observation_stats =
    "behaviour"``)."""

    def __init__(self, keep: int = 64):
        self.keep = keep
        self._by_version: Dict[int, Mapping[str, np.ndarray]] = {}
        self._latest: Optional[Mapping[str, np.ndarray]] = None

    def publish(self, version: int, arrays: Mapping[str, np.ndarray]) -> None:
        self._by_version[version] = arrays
        self._latest = arrays
        for old in [v for v in self._by_version if v < version - self.keep]:
            del self._by_version[old]

    def normalizer(self, version: Optional[int], like: "RunningNormalizer"
                   ) -> Optional["RunningNormalizer"]:
        """A normalizer (``like``'s settings) with version's statistics (the
        last ones published for version None); None if they were not
        published here (not since this process started, or too old)."""
        arrays = self._latest if version is None else self._by_version.get(version)
        if arrays is None:
            return None
        acting = RunningNormalizer(like.dim, like.clip, like.epsilon)
        acting.load_state_arrays(arrays)
        return acting


class VersionNormalizer:
    """Normalizes the steps of a batch acted by several weight versions, each
    with the statistics its version acted with (``Trainer.weights_mid_unroll``).

    Args:
        normalizers: version -> that version's statistics.
        step_versions: the version of each row [*R] (e.g. [T, K]) of the
            arrays ``normalize`` is given ([*R, D]).
    """

    def __init__(self, normalizers: Mapping[int, RunningNormalizer],
                 step_versions: torch.Tensor):
        self.normalizers = dict(normalizers)
        self.step_versions = step_versions

    def for_rows(self, step_versions: torch.Tensor) -> "VersionNormalizer":
        """The same statistics for other rows."""
        return VersionNormalizer(self.normalizers, step_versions)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """x [*R, D] float32, each row with its version's statistics."""
        out = torch.empty_like(x)
        for version, normalizer in self.normalizers.items():
            rows = self.step_versions == version
            out[rows] = normalizer.normalize(x[rows])
        return out
