"""Starting a training run from gin files: the steps that the train command
(``alf_async.bin.train``) and the Python API (``alf_async.train``) share.

1. ``prepare_run``: check the run directory and lock it (``utils.run_lock``:
   one run per directory, taken before anything of the run is read), parse
   the config (the run's saved ``config.gin`` when no gin file is given: a
   resume), check a resume's bindings against the run's config.gin
   (``config_changes``) and build the ``Trainer``; nothing is written into the
   run but the lock's record, and no process is started except
   multiprocessing's forkserver (``warm_up_torch_children``, started before
   the lock is taken so that no child inherits it);
2. ``announce_run``: once the caller's logging is set up, log a taken-over
   lock, the settings a resume changed (recorded too) and a learner device
   of the run's saved config that this machine lacks (the resumed run trains
   on the CPU instead, ``utils.devices.fall_back_to_cpu``);
3. ``save_run_config``: write ``config.gin``, what a resume parses;
4. the caller trains (``trainer.train()``), reporting failures its own way
   (the command: exit statuses and one-paragraph messages; the API: the
   exceptions themselves);
5. ``write_operative_config``: ``operative_config.gin``, the bindings the run
   used; ``PreparedRun.release()`` (on every path) drops the lock.
"""

from __future__ import annotations

import logging
import os
import dataclasses
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

from alf_async.config_changes import CHANGES_FILE, ConfigChange
from alf_async.utils.files import write_text
from alf_async.utils.run_lock import RunLock
from alf_async.utils.validation import ConfigError

RUN_CONFIG = "config.gin"
OPERATIVE_CONFIG = "operative_config.gin"


class RunDirError(ValueError):
    """A run directory that cannot hold a run; the message says why and what to do."""


class ResumeConfigError(ConfigError):
    """A resume whose bindings change what the run learns (``config_changes``)."""

    def __init__(self, message: str, refused: Sequence[ConfigChange]):
        super().__init__(message)
        self.refused = list(refused)


@dataclass
class PreparedRun:
    """A run ready to train.

    Attributes:
        trainer: the run's ``Trainer`` (built; ``train()`` not called yet).
        root_dir: the run directory, absolute.
        config_text: the parsed config (``gin.config_str()``), for config.gin.
        new_config: the config differs from the run's saved config.gin (other
            files or bindings), so ``save_run_config`` writes it.
        lock: the run directory's lock, held until ``release()`` (with the
            record of a dead holder it took over, ``takeover_note()``).
        changes: the bindings a resume changed (empty for a new run).
        checkpoint: the checkpoint a resume starts from (None: a new run).
        forced: the changes include refused ones, allowed by
            ``allow_config_change``.
        device_fallbacks: one sentence per learner device of the run's saved
            config that this machine lacks and that now trains on the CPU.
    """

    trainer: Any
    root_dir: str
    config_text: str
    new_config: bool
    lock: RunLock
    changes: List[ConfigChange] = dataclasses.field(default_factory=list)
    checkpoint: Optional[str] = None
    forced: bool = False
    device_fallbacks: List[str] = dataclasses.field(default_factory=list)

    def release(self) -> None:
        """Drop the run directory's lock (safe to call twice)."""
        self.lock.release()


def root_dir_problem(root_dir: str, argument: str = "--root_dir") -> Optional[str]:
    """Why ``root_dir`` cannot hold a run (None when it can); ``argument``:
    how the user gave it (a flag or a parameter name), for the message."""
    if os.path.exists(root_dir) and not os.path.isdir(root_dir):
        return f"{argument}={root_dir} is a file, not a folder; give a folder for the run"
    existing = root_dir
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return (f"{argument}={root_dir} cannot be created: {existing} is a file, not a "
                "folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        return (f"{argument}={root_dir} cannot be written: {existing} is not writable; "
                "choose a folder you can write to")
    return None


def newest_checkpoint_file(root_dir: str) -> Optional[str]:
    """The newest checkpoint file's path in ``root_dir`` (None: a new run)."""
    from alf_async.checkpoint import Checkpointer

    if not os.path.isdir(os.path.join(root_dir, "checkpoints")):
        return None
    found = Checkpointer(root_dir).list()
    return found[-1][1] if found else None


def prepare_run(root_dir: str, gin_files: Sequence[str] = (), gin_params: Sequence[str] = (),
                gin_search_path: Sequence[str] = (), gin_file_argument: str = "--gin_file",
                root_dir_argument: str = "--root_dir",
                allow_config_change: bool = False) -> PreparedRun:
    """Lock the run directory, parse the run's config into gin's global config,
    check a resume's changes and build its Trainer. The caller releases the
    lock (``PreparedRun.release()``) when the run ends; on an exception here it
    is already released.

    Args:
        root_dir: the run directory (a new run, or one to resume).
        gin_files: gin files (paths or bare names, ``config.find_gin_file``);
            empty: resume ``root_dir`` with its saved config.gin.
        gin_params: bindings such as ``Trainer.num_iterations=2``, parsed last.
        gin_search_path: folders searched for gin files after gin_configs/.
        gin_file_argument, root_dir_argument: how the user gives the gin files
            and the run directory, for the messages.
        allow_config_change: resume even when the bindings change what the
            run learns (the changes are logged and recorded all the same).

    Raises:
        RunDirError: ``root_dir`` cannot hold a run (or its lock file cannot be
            written), or it is to be resumed and holds no config.gin.
        RunLockedError: (a ``ConfigError``) another live process trains in
            ``root_dir``; the message names it.
        ResumeConfigError: (a ``ConfigError``) a resume changes what the run
            learns, without ``allow_config_change``; it names each binding.
        ConfigError: the config cannot be parsed, or the Trainer refuses it
            (as do ``ValueError``/``TypeError`` of the settings' checks).
    """
    from alf_async.utils.process import warm_up_torch_children

    warm_up_torch_children()  # the actors' imports run beside this process's
    import gin

    from alf_async.training.trainer import Trainer
    from alf_async.utils.devices import fall_back_to_cpu

    # TensorBoard's writer (a quarter of a second of imports) is imported now,
    # while the forkserver still imports what the actors need: later it would
    # delay the actors' start.
    import torch.utils.tensorboard  # noqa: F401

    root_dir = os.path.abspath(root_dir)
    problem = root_dir_problem(root_dir, root_dir_argument)
    if problem:
        raise RunDirError(problem)
    lock = RunLock(root_dir)
    try:
        lock.acquire()  # before anything of the run is read
    except OSError as e:
        raise RunDirError(f"the run could not start: could not write {lock.path}: "
                          f"{e.strerror or e}; make {root_dir} writable or free space "
                          "on its device") from None
    try:
        saved = os.path.join(root_dir, RUN_CONFIG)
        gin_files = list(gin_files)
        if not gin_files:
            if not os.path.isfile(saved):
                raise RunDirError(f"{gin_file_argument} is required: {root_dir} holds no "
                                  f"{RUN_CONFIG} of an earlier run to resume")
            gin_files = [saved]
        checkpoint = newest_checkpoint_file(root_dir) if os.path.isfile(saved) else None
        changes = _resume_changes(checkpoint, saved, gin_files, gin_params, gin_search_path)
        refused = [c for c in changes if not c.allowed]
        if refused and not allow_config_change:
            raise ResumeConfigError(
                f"resuming {root_dir} with settings that change what the run learns: "
                f"{'; '.join(c.describe() for c in refused)}. The run's checkpoint was "
                "trained with the values on the left (its config.gin). Train these "
                f"settings in a new {root_dir_argument}, resume with the run's own config "
                f"({root_dir_argument} alone), or allow the change (--allow_config_change; "
                "alf_async.train(..., allow_config_change=True)): it is logged and kept in "
                f"{os.path.join(root_dir, CHANGES_FILE)}.", refused)
        config_text = gin.config_str()  # before a fallback: config.gin keeps the device
        # A resume with the run's own config on a machine without its device
        # (trained on a GPU, resumed on a CPU machine) trains on the CPU.
        fallbacks = (fall_back_to_cpu(gin_params)
                     if [os.path.abspath(f) for f in gin_files] == [saved] else [])
        trainer = Trainer(root_dir=root_dir, run_lock=lock)
    except BaseException:
        lock.discard()  # nothing of a run that did not start stays behind
        raise
    new_config = (os.path.abspath(gin_files[0]) != saved or len(gin_files) > 1
                  or bool(gin_params))
    return PreparedRun(trainer, root_dir, config_text, new_config, lock, changes,
                       checkpoint, bool(refused), fallbacks)


def _resume_changes(checkpoint: Optional[str], saved: str, gin_files: Sequence[str],
                    gin_params: Sequence[str], gin_search_path: Sequence[str]
                    ) -> List[ConfigChange]:
    """Parse the run's config (left in gin's global config) and, for a resume
    (a checkpoint to start from), the bindings it changes against the run's
    saved config.gin."""
    from alf_async.config import parse_config
    from alf_async.config_changes import binding_values, config_changes

    run_bindings = None
    if checkpoint:
        parse_config([saved], extra_search_path=list(gin_search_path))
        run_bindings = binding_values()
    parse_config(list(gin_files), list(gin_params), extra_search_path=list(gin_search_path))
    return [] if run_bindings is None else config_changes(run_bindings, binding_values())


def announce_run(run: PreparedRun, logger: logging.Logger) -> None:
    """Log what the run's start changed (a taken-over lock, a resume's changed
    settings) once the caller's logging is set up, and record the changes in
    ``<root_dir>/config_changes.jsonl``."""
    from alf_async.config_changes import record_changes

    for line in run.device_fallbacks:
        logger.warning("%s", line)
    if run.lock.takeover_note():
        logger.warning("%s", run.lock.takeover_note())
    if not run.changes:
        return
    for change in run.changes:
        logger.log(logging.INFO if change.allowed else logging.WARNING,
                   "resumed with a changed setting%s: %s",
                   "" if change.allowed else " (allowed by allow_config_change)",
                   change.describe())
    try:
        record_changes(run.root_dir, run.changes, run.forced, run.checkpoint or "")
    except OSError as e:
        logger.warning("could not record the changed settings in %s: %s",
                       e.filename or CHANGES_FILE, e.strerror or e)


def save_run_config(run: PreparedRun) -> None:
    """Write the run's config.gin when its config is new (``OSError`` naming
    the file when it cannot be written)."""
    if run.new_config:
        write_text(os.path.join(run.root_dir, RUN_CONFIG), run.config_text)


def write_operative_config(root_dir: str, text: str, logger: logging.Logger) -> None:
    """Write ``operative_config.gin`` (the bindings the run used); a failed write
    is logged as one WARNING line, never raised over the run's own outcome."""
    path = os.path.join(root_dir, OPERATIVE_CONFIG)
    try:
        write_text(path, text)
    except OSError as e:
        logger.warning("could not write %s: %s (it only records the bindings the "
                       "run used)", e.filename or path, e.strerror or e)



def log_finished(counters: Mapping[str, float], logger: logging.Logger) -> None:
    """The INFO line of a run that reached its budget."""
    logger.info("done: %d iterations, %d env steps, %d episodes in %.0f s",
                counters["iteration"], counters["env_steps"], counters["episodes"],
                counters["wall_time"])
