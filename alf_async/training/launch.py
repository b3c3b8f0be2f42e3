"""Starting a training run from gin files: the steps that the train command
(``alf_async.bin.train``) and the Python API (``alf_async.train``) share.

1. ``prepare_run``: check the run directory, parse the config (the run's saved
   ``config.gin`` when no gin file is given: a resume) and build the
   ``Trainer``; nothing is written into the run and no process is started
   except multiprocessing's forkserver (``warm_up_torch_children``);
2. ``save_run_config``: write ``config.gin``, what a resume parses;
3. the caller trains (``trainer.train()``), reporting failures its own way
   (the command: exit statuses and one-paragraph messages; the API: the
   exceptions themselves);
4. ``write_operative_config``: ``operative_config.gin``, the bindings the run
   used.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from alf_async.utils.files import write_text

RUN_CONFIG = "config.gin"
OPERATIVE_CONFIG = "operative_config.gin"


class RunDirError(ValueError):
    """A run directory that cannot hold a run; the message says why and what to do."""


@dataclass
class PreparedRun:
    """A run ready to train.

    Attributes:
        trainer: the run's ``Trainer`` (built; ``train()`` not called yet).
        root_dir: the run directory, absolute.
        config_text: the parsed config (``gin.config_str()``), for config.gin.
        new_config: the config differs from the run's saved config.gin (other
            files or bindings), so ``save_run_config`` writes it.
    """

    trainer: Any
    root_dir: str
    config_text: str
    new_config: bool


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


def prepare_run(root_dir: str, gin_files: Sequence[str] = (), gin_params: Sequence[str] = (),
                gin_search_path: Sequence[str] = (), gin_file_argument: str = "--gin_file",
                root_dir_argument: str = "--root_dir") -> PreparedRun:
    """Parse the run's config into gin's global config and build its Trainer.

    Args:
        root_dir: the run directory (a new run, or one to resume).
        gin_files: gin files (paths or bare names, ``config.find_gin_file``);
            empty: resume ``root_dir`` with its saved config.gin.
        gin_params: bindings such as ``Trainer.num_iterations=2``, parsed last.
        gin_search_path: folders searched for gin files after gin_configs/.
        gin_file_argument, root_dir_argument: how the user gives the gin files
            and the run directory, for the messages.

    Raises:
        RunDirError: ``root_dir`` cannot hold a run, or it is to be resumed and
            holds no config.gin.
        ConfigError: the config cannot be parsed, or the Trainer refuses it
            (as do ``ValueError``/``TypeError`` of the settings' checks).
    """
    from alf_async.utils.process import warm_up_torch_children

    warm_up_torch_children()  # the actors' imports run beside this process's
    import gin

    from alf_async.config import parse_config
    from alf_async.training.trainer import Trainer

    # TensorBoard's writer (a quarter of a second of imports) is imported now,
    # while the forkserver still imports what the actors need: later it would
    # delay the actors' start.
    import torch.utils.tensorboard  # noqa: F401

    root_dir = os.path.abspath(root_dir)
    problem = root_dir_problem(root_dir, root_dir_argument)
    if problem:
        raise RunDirError(problem)
    saved = os.path.join(root_dir, RUN_CONFIG)
    gin_files = list(gin_files)
    if not gin_files:
        if not os.path.isfile(saved):
            raise RunDirError(f"{gin_file_argument} is required: {root_dir} holds no "
                              f"{RUN_CONFIG} of an earlier run to resume")
        gin_files = [saved]
    parse_config(gin_files, list(gin_params), extra_search_path=list(gin_search_path))
    trainer = Trainer(root_dir=root_dir)
    new_config = (os.path.abspath(gin_files[0]) != saved or len(gin_files) > 1
                  or bool(gin_params))
    return PreparedRun(trainer, root_dir, gin.config_str(), new_config)


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
