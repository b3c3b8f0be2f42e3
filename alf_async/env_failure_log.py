"""Env failures in the log: the first few in full, then a summary a minute.

An env that fails often (a flaky simulator) must not flood the log with one
line per failure; every failure still counts in the metrics (``env_failures``).
``EnvFailureReporter`` logs the first ``full_lines`` failures in full, then at
most one summary line per ``interval_s`` with counts per error kind and env.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable, Dict, Optional, Tuple

from alf_async.runtime.actor_pool import last_line
from alf_async.utils.formatting import format_duration

logger = logging.getLogger("alf_async")


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Za-z_]\w*)(?::|$)")
_LOST_WORKER_PREFIX = "env-worker process"


def failure_kind(details: str) -> str:
    """The kind of an env failure: the exception type of the last line of its
    traceback (``"ValueError"`` for ``"...ValueError: bad action"``, the module
    path dropped), ``"env-worker lost"`` for a worker process that died, hung
    or closed its pipe, else ``"other"``."""
    last = last_line(details)
    if last.startswith(_LOST_WORKER_PREFIX):
        return "env-worker lost"
    match = _EXCEPTION_LINE.match(last)
    return match.group(1) if match else "other"


class EnvFailureReporter:
    """Logs env failures without flooding the log: the first ``full_lines`` one
    line each (env, where, the error's last line), then at most one summary line
    every ``interval_s`` seconds with the failures held back since the previous
    one, counted per error kind (``failure_kind``) and per env.

    A summary is due when a failure is reported or ``tick`` is called (both
    runtimes call it once per training iteration) ``interval_s`` after the first
    failure it holds; ``flush`` writes the last one at the end of a run. The
    reporter only logs: the metrics' ``env_failures`` counter is kept by the
    caller and counts every failure.

    Args:
        full_lines: failures logged in full before summaries take over (>= 0).
        interval_s: least seconds between two summary lines (> 0).
        clock: monotonic seconds (injectable for tests).
        log: the logger written to (WARNING level).
    """

    MAX_ENVS_LISTED = 8  # per error kind in a summary line; the rest are counted

    def __init__(self, full_lines: int = 5, interval_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic,
                 log: logging.Logger = logger):
        if full_lines < 0 or not interval_s > 0:
            raise ValueError(f"EnvFailureReporter needs full_lines >= 0 and interval_s > 0, "
                             f"got {full_lines} and {interval_s}")
        self.full_lines, self.interval_s = int(full_lines), float(interval_s)
        self._clock, self._log = clock, log
        self.total = 0  # failures reported
        self.logged_in_full = 0
        self.summarised = 0  # failures written in summary lines
        self.env_name = ""
        # held back since the last summary: kind -> (where, env index) -> count
        self._held: Dict[str, Dict[Tuple[str, int], int]] = {}
        self._held_count = 0
        self._held_since: Optional[float] = None

    @property
    def held(self) -> int:
        """Failures reported but in no log line yet."""
        return self._held_count

    def report(self, where: str, env_index: int, details: str, env_name: str) -> None:
        """One failure of env ``env_index`` of ``where`` (e.g. ``"actor 0"``,
        ``"Hogwild worker 1"``) running ``env_name``; ``details``: its traceback."""
        self.total += 1
        self.env_name = env_name
        if self.logged_in_full < self.full_lines:
            self.logged_in_full += 1
            self._log.warning("env %d of %s (%s) failed and was recreated; its episode "
                              "was dropped: %s", env_index, where, env_name,
                              last_line(details))
            self._log.debug("env failure traceback:\n%s", details)
            return
        by_env = self._held.setdefault(failure_kind(details), {})
        by_env[(where, env_index)] = by_env.get((where, env_index), 0) + 1
        self._held_count += 1
        if self._held_since is None:
            self._held_since = self._clock()
        self.tick()

    def tick(self) -> None:
        """Write a summary line if failures are held back and the oldest one was
        held ``interval_s`` ago."""
        if self._held_count and self._clock() - self._held_since >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Write a summary line of the failures held back, if any (the run's end)."""
        if not self._held_count:
            return
        kinds = sorted(self._held.items(), key=lambda item: -sum(item[1].values()))
        parts = []
        for kind, by_env in kinds:
            envs = sorted(by_env.items(), key=lambda item: (-item[1], item[0]))
            listed = ", ".join(f"env {k} of {where}: {n}"
                               for (where, k), n in envs[:self.MAX_ENVS_LISTED])
            if len(envs) > self.MAX_ENVS_LISTED:
                listed += f", {len(envs) - self.MAX_ENVS_LISTED} more envs"
            parts.append(f"{kind} x {sum(by_env.values())} ({listed})")
        elapsed = self._clock() - self._held_since
        self.summarised += self._held_count
        self._log.warning(
            "%d more env failures of %s in the last %s, each env recreated and its "
            "episode dropped: %s; %d in all (the first %d logged in full; metrics: "
            "env_failures)", self._held_count, self.env_name,
            format_duration(elapsed), "; ".join(parts), self.total, self.logged_in_full)
        self._held, self._held_count, self._held_since = {}, 0, None


def log_env_failures(message: Any, env_name: str, reporter: EnvFailureReporter) -> int:
    """Report the env failures of a batch (``BatchReady``) to the run's
    ``reporter`` and let a due summary line out; returns how many failed, every
    one to be counted."""
    failures = message.unroll.env_failures
    for env_index, details in failures:
        reporter.report(f"actor {message.actor_id}", env_index, details, env_name)
    reporter.tick()
    return len(failures)
