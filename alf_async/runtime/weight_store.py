"""Policy weights as flat arrays, and a versioned store of them in shared memory.

``pack_weights`` / ``unpack_weights`` turn named groups of tensors (for example
``{"param": model.state_dict(), "normalizer": stats}``) into one flat dict of
numpy arrays keyed ``"<group>/<name>"`` and back: the form weights take in the
store, in a Ray object, or anywhere they cross a process boundary.

The learner ``publish``es a dict of arrays (parameters and normalizer statistics)
with a version number after every training iteration; actors ``read_newer`` it
when they start an unroll. A sequence lock makes reads tear-free without a lock
that a killed process could leave held: the writer makes the sequence counter odd
while writing and even when done; a reader copies the arrays and retries if the
counter was odd or changed during the copy. There is one writer (the learner).
"""

from __future__ import annotations

import time
import zlib
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from alf_async.utils.shared_memory import ArraySpec, SharedArrays, SharedBlockHolder, iter_specs

_META = "__meta__"  # int64 [2]: sequence counter, version


def pack_weights(groups: Mapping[str, Mapping[str, Any]]) -> Dict[str, np.ndarray]:
    """Flatten ``{group: {name: tensor or array}}`` into ``{"group/name": array}``.

    Tensors are detached and copied to CPU numpy; floating-point parameters keep
    their dtype (float32 for the networks, float64 for normalizer statistics).
    """
    arrays = {}
    for group, values in groups.items():
        for name, value in values.items():
            if hasattr(value, "detach"):  # a torch tensor
                value = value.detach().cpu().numpy()
            arrays[f"{group}/{name}"] = np.array(value, copy=True)
    return arrays


def unpack_weights(arrays: Mapping[str, np.ndarray]) -> Dict[str, Dict[str, np.ndarray]]:
    """Inverse of ``pack_weights``: ``{"group/name": array}`` -> ``{group: {name: array}}``."""
    groups: Dict[str, Dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        group, _, name = key.partition("/")
        groups.setdefault(group, {})[name] = value
    return groups


def weights_digest(arrays: Mapping[str, np.ndarray]) -> int:
    """A CRC32 of all arrays' bytes in key order; equal weights give equal digests."""
    crc = 0
    for key in sorted(arrays):
        crc = zlib.crc32(np.ascontiguousarray(arrays[key]).view(np.uint8), crc)
    return crc


class WeightStore(SharedBlockHolder):
    """Versioned weights shared by one writer and many readers."""

    def __init__(self, block: SharedArrays):
        super().__init__(block)
        self._meta = block.arrays[_META]

    @classmethod
    def create(cls, example: Mapping[str, np.ndarray]) -> "WeightStore":
        """A store for arrays shaped like ``example``; version starts at -1 (empty)."""
        specs = dict(iter_specs(example))
        specs[_META] = ArraySpec((2,), "int64")
        store = cls(SharedArrays.create(specs, tag="weights"))
        store._meta[:] = (0, -1)
        return store

    @property
    def version(self) -> int:
        return int(self._meta[1])

    def publish(self, arrays: Mapping[str, np.ndarray], version: int) -> None:
        """Write all arrays and set ``version`` (the learner only)."""
        self._meta[0] += 1  # odd: write in progress
        for key, value in arrays.items():
            self.block.arrays[key][...] = value
        self._meta[1] = version
        self._meta[0] += 1  # even: consistent

    def read_newer(self, known_version: int, timeout_s: Optional[float] = None
                   ) -> Optional[Tuple[int, Dict[str, np.ndarray]]]:
        """Copy the weights if their version is newer than ``known_version``.

        Returns (version, arrays) or None if nothing newer is published. With
        ``timeout_s`` it waits up to that long for a newer version.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            seq = int(self._meta[0])
            version = int(self._meta[1])
            if seq % 2 == 0 and version > known_version:
                copies = {k: v.copy() for k, v in self.block.arrays.items() if k != _META}
                if int(self._meta[0]) == seq:
                    return version, copies
                continue
            if seq % 2 == 1 and (deadline is None or time.monotonic() <= deadline):
                time.sleep(0)
                continue
            if deadline is None or time.monotonic() > deadline:
                return None
            time.sleep(0.001)
