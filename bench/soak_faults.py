"""The faults bench/soak.py injects into a running training, and how it tells
that each one happened and that the run came through it.

Every fault is real: a signal sent to a real process of the run, an exception
raised inside a real env step, a real Ray node taken out of the cluster.

| kind | what | took effect when |
|---|---|---|
| ``actor_sigkill`` | SIGKILL an actor process | the trainer counts an actor restart and trains on |
| ``env_worker_sigkill`` | SIGKILL an env-worker process | the run counts an env failure and trains on |
| ``actor_sigstop`` | SIGSTOP an actor, SIGCONT after ``stop_s`` | the actor was stopped, and the run trains after SIGCONT |
| ``trainer_sigterm`` | SIGTERM the trainer; the soak resumes it | it exits 143 having released its lock; the resumed run resumes from a checkpoint and trains |
| ``env_raise`` | an env step raises (``OnDemandFault``) | the trigger file was consumed and the run counts an env failure |
| ``trainer_sigkill`` | SIGKILL the trainer; the soak resumes it | its lock record is left; the resumed run takes it over, resumes and trains |
| ``node_removal`` | (Ray) remove the worker node of an actor; add a node back after ``node_down_s`` | the actor is restarted elsewhere, training goes on, the node is back |

A fault waits for a target (a run that has written a row since it last
started, with its actors and env workers up); ``took_effect`` is asked each
poll until it answers True, or False once ``effect_timeout_s`` has passed.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol

import psutil

from alf_async.utils.run_lock import LOCK_FILE

PROCESS_FAULTS = ("actor_sigkill", "env_worker_sigkill", "actor_sigstop", "trainer_sigterm",
                  "env_raise", "trainer_sigkill")
NODE_FAULT = "node_removal"
TRAINER_FAULTS = {"trainer_sigterm": signal.SIGTERM, "trainer_sigkill": signal.SIGKILL}
# The trainer's exit status after SIGTERM (alf_async.bin.train).
SIGTERM_EXIT = 143
TAKEOVER_LINE = "took over the lock of"


class RunView(Protocol):
    """What a fault sees of the soaked run (bench/soak.py's ``Soak``)."""

    root_dir: str
    fault_file: str
    trainer_pid: Optional[int]
    life_index: int

    def now(self) -> float: ...

    def processes(self, role: str) -> List[psutil.Process]: ...

    def rows_of_life(self, index: int) -> List[Dict]: ...

    def life(self, index: int) -> Any: ...

    def remove_actor_node(self) -> Optional[str]: ...

    def add_node(self) -> None: ...

    def nodes_alive(self) -> int: ...


@dataclass
class FaultRecord:
    """One injected fault.

    kind: one of ``PROCESS_FAULTS`` or ``NODE_FAULT``.
    at_s: soak seconds when it was injected.
    life: index of the trainer life it hit.
    target: pid (or Ray node id) hit.
    before: the counters of the life's last row when it was injected.
    took_effect: None while undecided, then True or False.
    note: what was seen (or missing).
    """

    kind: str
    at_s: float
    life: int
    target: Any = None
    before: Dict[str, int] = field(default_factory=dict)
    took_effect: Optional[bool] = None
    note: str = ""
    pending: Dict[str, Any] = field(default_factory=dict)  # a later step (SIGCONT, node back)

    def to_json(self) -> Dict:
        return {"kind": self.kind, "at_s": round(self.at_s, 1), "life": self.life,
                "target": self.target, "took_effect": self.took_effect, "note": self.note}


def lock_record(root_dir: str) -> Optional[Dict]:
    """The holder record in the run's lock file (None: released, or no file)."""
    try:
        with open(os.path.join(root_dir, LOCK_FILE), encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def _counters(row: Optional[Dict]) -> Dict[str, int]:
    row = row or {}
    return {k: int(row.get(k) or 0) for k in ("iteration", "actor_restarts", "env_failures")}


def _send(proc: psutil.Process, sig: int) -> bool:
    try:
        proc.send_signal(sig)
        return True
    except psutil.Error:
        return False


def _wait_stopped(proc: psutil.Process, timeout_s: float) -> bool:
    """Whether ``proc`` shows as stopped within ``timeout_s`` (a signal is
    delivered asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if proc.status() == psutil.STATUS_STOPPED:
                return True
        except psutil.Error:
            return False
        time.sleep(0.01)
    return False


def inject(kind: str, view: RunView, stop_s: float, node_down_s: float) -> Optional[FaultRecord]:
    """Inject a fault of ``kind`` now; None if it has no target yet (try later)."""
    rows = view.rows_of_life(view.life_index)
    if view.trainer_pid is None or not rows:
        return None
    record = FaultRecord(kind, view.now(), view.life_index, before=_counters(rows[-1]))
    if kind in ("actor_sigkill", "actor_sigstop", "env_worker_sigkill"):
        role = "env_workers" if kind == "env_worker_sigkill" else "actors"
        targets = view.processes(role)
        if not targets:
            return None
        victim = targets[record.before["iteration"] % len(targets)]
        sig = signal.SIGSTOP if kind == "actor_sigstop" else signal.SIGKILL
        if not _send(victim, sig):
            return None
        record.target = victim.pid
        if kind == "actor_sigstop":
            stopped = _wait_stopped(victim, timeout_s=5.0)
            record.pending = {"process": victim, "cont_at": record.at_s + stop_s,
                              "was_stopped": stopped}
    elif kind in TRAINER_FAULTS:
        os.kill(view.trainer_pid, TRAINER_FAULTS[kind])
        record.target = view.trainer_pid
    elif kind == "env_raise":
        with open(view.fault_file, "w", encoding="utf-8"):
            pass
        record.target = view.fault_file
    elif kind == NODE_FAULT:
        node = view.remove_actor_node()
        if node is None:
            return None
        record.target = node
        record.pending = {"add_at": record.at_s + node_down_s}
    else:
        raise ValueError(f"unknown fault kind {kind!r}")
    return record


def advance(record: FaultRecord, view: RunView) -> None:
    """The fault's later step, when due: SIGCONT the stopped actor, add a node back."""
    if "cont_at" in record.pending and view.now() >= record.pending["cont_at"]:
        _send(record.pending.pop("process"), signal.SIGCONT)
        record.pending.pop("cont_at")
        record.pending["cont_sent_s"] = view.now()
        record.pending["rows_at_cont"] = len(view.rows_of_life(record.life))
    if "add_at" in record.pending and view.now() >= record.pending["add_at"]:
        view.add_node()
        record.pending.pop("add_at")
        record.pending["node_added_s"] = view.now()


def _rows_after(view: RunView, record: FaultRecord) -> List[Dict]:
    """The rows the fault's trainer life wrote after the fault."""
    return [r for r in view.rows_of_life(record.life)
            if r["iteration"] > record.before["iteration"]]


def took_effect(record: FaultRecord, view: RunView) -> Optional[bool]:
    """True once the fault's effect is seen (``record.note`` says what), False
    if it cannot be seen any more, None while undecided."""
    if record.kind in TRAINER_FAULTS:
        return _trainer_fault_effect(record, view)
    if view.life_index != record.life:
        record.note = "the trainer restarted before the effect was seen"
        return False
    rows = _rows_after(view, record)
    if record.kind in ("actor_sigkill", NODE_FAULT):
        restarted = [r for r in rows if r["actor_restarts"] > record.before["actor_restarts"]]
        if record.kind == NODE_FAULT and "node_added_s" not in record.pending:
            return None
        if restarted and rows[-1]["iteration"] > restarted[0]["iteration"]:
            record.note = (f"actor restart counted at iteration {restarted[0]['iteration']}; "
                           f"trained on to {rows[-1]['iteration']}")
            if record.kind == NODE_FAULT:
                record.note += f"; {view.nodes_alive()} nodes alive after the node came back"
                return view.nodes_alive() >= 2
            return True
        return None
    if record.kind in ("env_worker_sigkill", "env_raise"):
        if record.kind == "env_raise" and os.path.exists(view.fault_file):
            return None  # no env stepped since
        failed = [r for r in rows if r["env_failures"] > record.before["env_failures"]]
        if failed and rows[-1]["iteration"] > failed[0]["iteration"]:
            record.note = (f"env failure counted at iteration {failed[0]['iteration']}; "
                           f"trained on to {rows[-1]['iteration']}")
            return True
        return None
    if record.kind == "actor_sigstop":
        if "cont_sent_s" not in record.pending:
            return None
        if not record.pending["was_stopped"]:
            record.note = "the actor was not seen stopped after SIGSTOP"
            return False
        if len(view.rows_of_life(record.life)) > record.pending["rows_at_cont"]:
            record.note = (f"stopped for {record.pending['cont_sent_s'] - record.at_s:.0f} s; "
                           f"trained on after SIGCONT to iteration {rows[-1]['iteration']}")
            return True
        return None
    raise ValueError(f"unknown fault kind {record.kind!r}")


def _trainer_fault_effect(record: FaultRecord, view: RunView) -> Optional[bool]:
    if view.life_index <= record.life:
        return None  # not ended and resumed yet
    ended, resumed = view.life(record.life), view.life(record.life + 1)
    if record.kind == "trainer_sigterm":
        if ended.exit_status != SIGTERM_EXIT or ended.lock_at_exit is not None:
            record.note = (f"exit {ended.exit_status}, lock record at exit "
                           f"{ended.lock_at_exit}")
            return False
    else:
        holder = ended.lock_at_exit or {}
        if ended.exit_status != -signal.SIGKILL or holder.get("pid") != record.target:
            record.note = f"exit {ended.exit_status}, lock record at exit {holder}"
            return False
    if not view.rows_of_life(record.life + 1):
        return None
    log = resumed.log_text()
    resumed.read_resumed_from()
    if record.kind == "trainer_sigkill" and TAKEOVER_LINE not in log:
        record.note = "the resumed run did not log that it took over the lock"
        return False
    record.note = (f"exit {ended.exit_status}; lock "
                   f"{'released' if ended.lock_at_exit is None else 'left, taken over'}; "
                   f"resumed from {resumed.resumed_from or 'nothing (no checkpoint yet)'}")
    return True
