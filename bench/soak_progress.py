"""The run's progress across trainer restarts, for bench/soak.py: the rows of
metrics.jsonl read as they are written, and the check that the counters
never went back by more than one checkpoint interval per restart.

A resumed run truncates metrics.jsonl to the checkpoint it resumes from, so
the rows a killed trainer wrote past its last checkpoint are gone from the
file; ``MetricsTail`` keeps every row it has read, and the soak closes one
``TrainerLife`` per train process with the rows seen up to its end.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

# The trainer's log line naming the checkpoint a resumed run starts from.
RESUMED_LINE = re.compile(r"resumed from \S+ at iteration (\d+), (\d+) env steps")


class MetricsTail:
    """The rows of ``<root_dir>/metrics.jsonl``, read incrementally.

    ``poll`` reads the lines appended since the previous call; when the file
    no longer holds the last row read where it was (a resumed run truncated
    it), it reads the file again from the start. A torn last line waits for
    the next poll.
    """

    def __init__(self, root_dir: str):
        self.path = os.path.join(root_dir, "metrics.jsonl")
        self.rows: List[Dict] = []
        self.resets = 0  # times the file was found truncated and read again
        self._offset = 0  # bytes of the file read into rows
        self._last_line = b""  # the last whole line read, to notice a truncation

    def _unchanged(self, f) -> bool:
        if not self._last_line:
            return True
        f.seek(self._offset - len(self._last_line))
        return f.read(len(self._last_line)) == self._last_line

    def poll(self) -> List[Dict]:
        """Read what was appended; returns all rows the file holds now."""
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            return self.rows
        with f:
            if os.fstat(f.fileno()).st_size < self._offset or not self._unchanged(f):
                self.rows, self._offset, self._last_line = [], 0, b""
                self.resets += 1
            f.seek(self._offset)
            data = f.read()
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # torn: the rest of it comes later
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                break
            self.rows.append(row)
            self._offset += len(line)
            self._last_line = line
        return self.rows

    def last(self) -> Optional[Dict]:
        return self.rows[-1] if self.rows else None


@dataclass
class TrainerLife:
    """One train process of the soak, from its start to its exit.

    index: 0 for the first, then one more per restart.
    started_s, ended_s: soak seconds.
    log_path: where its output goes.
    first_row_index, tail_resets: ``len(tail.rows)`` and ``tail.resets`` when
        it started: rows appended past the first before the file is truncated
        are its own; once truncated, those past its checkpoint.
    exit_status: its exit status (negative: killed by that signal).
    resumed_from: (iteration, env steps) of the checkpoint it resumed from
        (its log's ``resumed from`` line), None for a fresh start.
    rows: metrics rows it wrote (those past ``resumed_from``), as read.
    lock_at_exit: the holder record its run.lock held when it had ended (None:
        released).
    first_row_s: soak seconds when its first row was seen.
    """

    index: int
    started_s: float
    log_path: str
    first_row_index: int = 0
    tail_resets: int = 0
    ended_s: Optional[float] = None
    exit_status: Optional[int] = None
    resumed_from: Optional[List[int]] = None
    rows: List[Dict] = field(default_factory=list)
    lock_at_exit: Optional[Dict] = None
    first_row_s: Optional[float] = None

    def log_text(self) -> str:
        """What it printed so far."""
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def read_resumed_from(self) -> Optional[List[int]]:
        """Parse the resume line of this life's log (None: not resumed)."""
        match = RESUMED_LINE.search(self.log_text())
        self.resumed_from = [int(match.group(1)), int(match.group(2))] if match else None
        return self.resumed_from

    def rows_in(self, tail: MetricsTail) -> List[Dict]:
        """The rows of ``tail`` this life wrote."""
        if tail.resets == self.tail_resets:
            return tail.rows[self.first_row_index:]
        start = (self.read_resumed_from() or [0])[0]
        return [r for r in tail.rows if r["iteration"] > start]

    def close(self, ended_s: float, exit_status: int, tail: MetricsTail) -> None:
        """Record the end and the rows it wrote."""
        self.ended_s, self.exit_status = ended_s, exit_status
        tail.poll()
        self.read_resumed_from()
        self.rows = self.rows_in(tail)


def counters_report(lives: List[TrainerLife], checkpoint_interval: int) -> Dict:
    """Whether the counters only went forward, and the progress each restart lost.

    Within a life, iterations must rise by one per row and env steps rise.
    At each restart, the new life must resume from a checkpoint no later than
    the last iteration the previous life wrote, losing at most
    ``checkpoint_interval`` iterations (and the env steps of those), and go on
    from there: its first row is the next iteration, with more env steps than
    the checkpoint's.

    Returns {"restarts": [{"after_life", "last_iteration", "resumed_from",
    "iterations_lost", "env_steps_lost"}], "problems": [text], "max_iterations_lost",
    "restarts_checked"}.
    """
    problems: List[str] = []
    restarts: List[Dict] = []
    for life in lives:
        its = [r["iteration"] for r in life.rows]
        steps = [r["env_steps"] for r in life.rows]
        if its and its != list(range(its[0], its[0] + len(its))):
            problems.append(f"life {life.index}: iterations not consecutive")
        if any(b <= a for a, b in zip(steps, steps[1:])):
            problems.append(f"life {life.index}: env_steps went back")
    for before, after in zip(lives, lives[1:]):
        if not before.rows:
            problems.append(f"life {before.index} wrote no row before its restart")
            continue
        last = before.rows[-1]
        resumed = after.resumed_from or [0, 0]
        record = {"after_life": before.index, "exit_status": before.exit_status,
                  "last_iteration": last["iteration"], "last_env_steps": last["env_steps"],
                  "resumed_from": resumed, "iterations_lost": last["iteration"] - resumed[0],
                  "env_steps_lost": last["env_steps"] - resumed[1]}
        restarts.append(record)
        if record["iterations_lost"] < 0:
            problems.append(f"life {after.index} resumed from iteration {resumed[0]}, past "
                            f"the last one written ({last['iteration']})")
        elif record["iterations_lost"] > checkpoint_interval:
            problems.append(f"restart after life {before.index} lost "
                            f"{record['iterations_lost']} iterations (> {checkpoint_interval})")
        if after.rows:
            first = after.rows[0]
            if first["iteration"] != resumed[0] + 1 or first["env_steps"] <= resumed[1]:
                problems.append(f"life {after.index} went on from iteration "
                                f"{first['iteration']} ({first['env_steps']} env steps), not "
                                f"from its checkpoint {resumed}")
    lost = [r["iterations_lost"] for r in restarts]
    return {"restarts": restarts, "problems": problems,
            "max_iterations_lost": max(lost) if lost else None,
            "restarts_checked": len(restarts)}
