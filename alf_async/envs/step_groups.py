"""How a ``BatchedEnv`` groups its K envs for stepping, and which group in
flight can be received first.

A group is the unit an actor acts for and steps at once: with W env workers
and S splits (W >= 1, S >= 2) the envs of one worker in one split, otherwise a
whole split (``split_groups``). Each env worker answers the groups sent to it
in the order they were sent, so of the groups in flight only each worker's
oldest can be ready (``first_ready``).
"""

from __future__ import annotations

import select
from typing import List, Sequence, Set, Tuple

import numpy as np

from alf_async.envs.env_worker import _Worker

# (the positions of the workers that step a group, its split)
GroupWorkers = Tuple[Tuple[int, ...], int]


def split_groups(num_envs: int, num_workers: int, num_splits: int
                 ) -> Tuple[List[slice], List[GroupWorkers]]:
    """The groups a caller steps one at a time, as strided slices of the K envs
    (views, not copies, of [K, ...] arrays), and per group (the positions of
    the workers that step it, its split). Split s is s::S for W = 0 or S = 1
    (every worker's envs, or no worker); with W >= 1 and S >= 2 the group of
    worker w in split s is the envs k of w's contiguous range with k % S == s
    (W x S groups, split-major)."""
    splits: List[slice] = []
    groups: List[GroupWorkers] = []
    ranges = np.array_split(np.arange(num_envs), max(num_workers, 1))
    for split in range(num_splits):
        if num_workers == 0 or num_splits == 1:
            splits.append(slice(split, None, num_splits))
            groups.append((tuple(range(num_workers)), split))
            continue
        for position, envs in enumerate(ranges):
            first, end = int(envs[0]), int(envs[-1]) + 1
            splits.append(slice(first + (split - first) % num_splits, end, num_splits))
            groups.append(((position,), split))
    return splits, groups


class AnswerPoller:
    """One ``select.poll`` over the env workers' pipes, rebuilt when the
    workers' pipes change (a worker replaced): which workers have answered."""

    def __init__(self):
        self._fds: Tuple[int, ...] = ()
        self._poll = select.poll()

    def answered(self, workers: Sequence[_Worker], timeout_s: float) -> Set[int]:
        """The positions of the ``workers`` with a reply (or a closed pipe)
        waiting, after waiting up to ``timeout_s`` seconds for one."""
        fds = tuple(w.conn.fileno() for w in workers)
        if fds != self._fds:
            self._poll = select.poll()
            for fd in fds:
                self._poll.register(fd, select.POLLIN)
            self._fds = fds
        events = self._poll.poll(int(timeout_s * 1000))
        return {fds.index(fd) for fd, _ in events}


def first_ready(in_flight: Sequence[int], groups: Sequence[GroupWorkers],
                workers: Sequence[_Worker], poller: AnswerPoller, timeout_s: float) -> int:
    """Of the groups ``in_flight`` (in the order they were sent), the one whose
    reply can be received first: of each worker's oldest group in flight, the
    first whose worker has answered, waiting up to ``timeout_s`` seconds for
    one if none has; the earliest sent among several ready ones. A group whose
    reply will never come (its worker was replaced meanwhile) is ready at once.
    Falls back to the earliest sent group where readiness cannot be told apart
    (a group stepped by several workers) and when no worker with a group in
    flight answers in time (receiving it then reports the lost worker)."""
    heads = {}  # worker position -> its oldest group in flight
    for group in in_flight:
        positions, split = groups[group]
        if len(positions) != 1:
            return in_flight[0]
        position = positions[0]
        if position in heads:
            continue
        if split in workers[position].lost_splits:
            return group
        heads[position] = group
    if len(heads) == 1:
        return next(iter(heads.values()))
    answered = poller.answered(workers, timeout_s)  # at once if one has answered
    for position, group in heads.items():
        if position in answered:
            return group
    return in_flight[0]
