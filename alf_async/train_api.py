"""Training a run from Python: ``alf_async.train``.

    counters = alf_async.train("ppo_cartpole.gin", "runs/cartpole",
                               bindings=["Trainer.num_env_steps=50000"])

The same steps as the train command (``training.launch``, shared with
``alf_async.bin.train``): the run directory holds what a command-line run
writes (config.gin, operative_config.gin, metrics.jsonl, checkpoints/,
log.txt, ...), and training the same ``root_dir`` again resumes it. Problems
are raised as exceptions rather than turned into exit statuses.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Dict, Iterator, Optional, Sequence, Union

__all__ = ["train"]


def train(gin_file: Union[str, Sequence[str], None], root_dir: Union[str, "os.PathLike[str]"],
          bindings: Sequence[str] = (), gin_search_path: Sequence[str] = (),
          allow_config_change: bool = False) -> Dict[str, float]:
    """Train (or resume) the run in ``root_dir`` until its budget is reached.

    Args:
        gin_file: a gin file (a path, or a bare name looked up in the working
            directory, the project's gin_configs/, ``gin_search_path`` and
            $ALF_ASYNC_CONFIG_PATH), or several; None: resume ``root_dir``
            with its saved config.gin.
        root_dir: the run directory (created if missing; resumed from its
            newest checkpoint if it has one).
        bindings: gin bindings parsed after the files, e.g.
            ``["Trainer.num_env_steps=50000"]``.
        gin_search_path: folders searched for gin files after gin_configs/.
        allow_config_change: resume even when ``gin_file``/``bindings`` change
            what the run learns (the env, networks, algorithm, learner
            hyperparameters, seed); without it such a resume raises
            ``ResumeConfigError``. Changes of how the run is carried out (the
            budget, intervals, actors, envs, device, ...) are always applied;
            every change is logged and kept in ``config_changes.jsonl``.

    Returns:
        The run's final counters: ``iteration``, ``env_steps``, ``episodes``
        (ints) and ``wall_time`` (seconds of training, float).

    While it runs, the "alf_async" logger writes to stderr and to
    ``<root_dir>/log.txt`` (its handlers from before are put back afterwards),
    and gin's global config holds the run's bindings; the bindings from before
    the call are put back when it returns or raises. Call it from the main
    thread (it handles Ctrl-C and SIGTERM by writing a final checkpoint). The
    processes it starts (actors, env workers, an evaluator) have ended when it
    returns or raises, except multiprocessing's forkserver, which serves later
    runs and ends when this process exits.

    Raises:
        RunDirError: (a ``ValueError``) ``root_dir`` cannot hold a run, or
            ``gin_file`` is None and ``root_dir`` holds no config.gin.
        RunLockedError: (a ``ConfigError``) another training runs in
            ``root_dir``; the message names its pid, host and command.
        ResumeConfigError: (a ``ConfigError``) see ``allow_config_change``.
        ConfigError: (a ``ValueError``) the config cannot be parsed or the
            trainer refuses it; the message names the file, line or setting.
        CheckpointError: the checkpoint to resume from cannot be used.
        ActorStartupError, ActorPoolError: the env or the actors failed.
        NonFiniteError: the learner's weights became NaN or infinite.
        OSError: a file of the run could not be written (it names the file).
        KeyboardInterrupt: Ctrl-C, after a final checkpoint was written
            (``TerminationRequested`` for SIGTERM).
    """
    import gin

    from alf_async.training.launch import (announce_run, log_finished, prepare_run,
                                           save_run_config, write_operative_config)
    from alf_async.utils.gin_scope import restored_gin_config

    if isinstance(gin_file, (str, os.PathLike)):
        gin_files = [os.fspath(gin_file)]
    else:
        gin_files = [os.fspath(f) for f in gin_file or ()]
    with restored_gin_config():
        run = prepare_run(os.fspath(root_dir), gin_files, list(bindings),
                          list(gin_search_path), gin_file_argument="gin_file",
                          root_dir_argument="root_dir",
                          allow_config_change=allow_config_change)
        try:
            with _run_logging(run.root_dir) as logger:
                announce_run(run, logger)
                save_run_config(run)
                try:
                    counters = run.trainer.train()
                finally:
                    write_operative_config(run.root_dir, gin.operative_config_str(), logger)
                log_finished(counters, logger)
        finally:
            run.release()
    return counters


@contextlib.contextmanager
def _run_logging(root_dir: Optional[str]) -> Iterator[logging.Logger]:
    """The "alf_async" logger as the train command sets it up
    (``utils.run_log.setup_logging``: stderr and ``<root_dir>/log.txt``) for the
    block; afterwards its handlers (closed) are replaced by those from before
    (kept open), with its level and propagation."""
    from alf_async.utils.run_log import setup_logging

    logger = logging.getLogger("alf_async")
    before = (list(logger.handlers), logger.level, logger.propagate)
    for handler in before[0]:
        logger.removeHandler(handler)  # setup_logging would close them
    try:
        yield setup_logging(root_dir)
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
        for handler in before[0]:
            logger.addHandler(handler)
        logger.setLevel(before[1])
        logger.propagate = before[2]
