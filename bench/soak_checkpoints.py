"""Every checkpoint a soaked run writes must load, for bench/soak.py.

The run keeps only its last few checkpoints, so ``CheckpointAudit.check`` is
called every sample: each ``ckpt-<i>.pt`` not seen before is loaded as a
resumed run loads it (``load_checkpoint_file``: ``torch.load`` with
``weights_only=True``) and its iteration counter compared with its name. A
file removed by the run before the audit reached it counts as missed, not
failed.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List

_NAME = re.compile(r"^ckpt-(\d+)\.pt$")


class CheckpointAudit:
    """Loads each new checkpoint of ``<root_dir>/checkpoints`` once.

    loaded: iterations of the checkpoints that loaded with the right counter.
    failed: {"file", "error"} of those that did not.
    missed: checkpoints listed but removed before they were read.
    """

    def __init__(self, root_dir: str):
        self.directory = os.path.join(root_dir, "checkpoints")
        self.loaded: List[int] = []
        self.failed: List[Dict[str, str]] = []
        self.missed: List[int] = []
        self._seen: Dict[int, int] = {}  # iteration -> inode of the file read

    def check(self) -> None:
        """Load the checkpoints written since the previous call."""
        # Imported here: torch comes with it, and ``bench.soak --help`` needs none.
        from alf_async.checkpoint import CheckpointError, load_checkpoint_file

        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for name in names:
            match = _NAME.match(name)
            if not match:
                continue
            iteration = int(match.group(1))
            path = os.path.join(self.directory, name)
            try:
                inode = os.stat(path).st_ino
            except FileNotFoundError:
                continue
            if self._seen.get(iteration) == inode:
                continue  # read already (a resumed run may write it again: a new inode)
            self._seen[iteration] = inode
            try:
                state = load_checkpoint_file(path)
            except CheckpointError as e:
                if not os.path.exists(path):
                    self.missed.append(iteration)
                    continue
                self.failed.append({"file": name, "error": str(e).splitlines()[0]})
                continue
            counter = state.get("counters", {}).get("iteration")
            if counter != iteration:
                self.failed.append({"file": name,
                                    "error": f"its iteration counter is {counter}"})
            else:
                self.loaded.append(iteration)

    def report(self) -> Dict:
        return {"loaded": len(self.loaded), "failed": self.failed,
                "missed": sorted(self.missed), "all_load": bool(self.loaded)
                and not self.failed}
