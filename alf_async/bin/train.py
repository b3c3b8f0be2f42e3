"""Train PPO2 from gin files.

    python -m alf_async.bin.train --gin_file=ppo_bullet_humanoid.gin --root_dir=RUN
    python -m alf_async.bin.train --root_dir=RUN          # resume RUN
    python -m alf_async.bin.train --gin_file=F            # a new run in runs/F-<date>-<time>

``--gin_file`` takes a path or a bare name looked up in the current directory,
the project's gin_configs/, the ``--gin_search_path`` folders, then
$ALF_ASYNC_CONFIG_PATH; an ``include`` resolves first against the including
file's folder (see alf_async.config). ``--gin_param`` adds bindings (repeatable). Running again with the same ``--root_dir`` resumes from its
newest checkpoint; without ``--gin_file`` it reuses the run's saved config. A
learner device that config names and this machine lacks (a run trained on a GPU,
resumed on a CPU machine) becomes "cpu", with one log line saying so, unless a
``--gin_param`` binds the device (which is then checked like any other).

Exit status: 0 done; 2 bad input (configuration, files, a run that cannot start);
1 the run failed (the message names the newest checkpoint to resume from);
130 interrupted by Ctrl-C; 143 stopped by SIGTERM (a final checkpoint is written
when an iteration has finished since the last one).

A file of the run that cannot be written (no space left on the device, a quota,
a read-only folder) stops the run with exit status 1 and one paragraph: the file,
the system's reason, the newest intact checkpoint and the command that resumes
the run once the cause is fixed.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import time
from typing import List, Optional, Sequence

from absl import flags

from alf_async.bin.common import ExitCode, run_command, setup_logging, user_error
from alf_async.utils.files import write_text

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", None, "gin file(s): a path or a bare name on the "
                          "gin search path")
flags.DEFINE_multi_string("gin_param", None, "gin binding, e.g. 'Trainer.num_actors=2'")
flags.DEFINE_multi_string("gin_search_path", None, "a folder searched for gin files and "
                          "includes after the package's gin_configs/ (repeatable)")
flags.DEFINE_string("root_dir", None, "run directory (resumed if it exists; default: "
                    "runs/<gin file>-<date>-<time> under the working directory)")

RUN_CONFIG = "config.gin"


def train(root_dir: str, gin_files: Sequence[str] = (), gin_params: Sequence[str] = (),
          gin_search_path: Sequence[str] = ()) -> int:
    """Parse the config, train, and return the process exit status."""
    from alf_async.utils.process import warm_up_torch_children

    warm_up_torch_children()  # the actors' imports run beside this process's
    import gin

    from alf_async.algorithms.guarded_step import NonFiniteError
    from alf_async.checkpoint import CheckpointError
    from alf_async.config import ConfigError, parse_config
    from alf_async.runtime.actor_pool import ActorPoolError, ActorStartupError
    from alf_async.signals import TerminationRequested
    from alf_async.training.trainer import Trainer
    from alf_async.utils.devices import fall_back_to_cpu

    # TensorBoard's writer (a quarter of a second of imports) is imported now,
    # while the forkserver still imports what the actors need: later it would
    # delay the actors' start.
    import torch.utils.tensorboard  # noqa: F401

    root_dir = os.path.abspath(root_dir)
    problem = _root_dir_problem(root_dir)
    if problem:
        return user_error(problem)
    saved = os.path.join(root_dir, RUN_CONFIG)
    if not gin_files:
        if not os.path.isfile(saved):
            return user_error(
                f"--gin_file is required: {root_dir} holds no {RUN_CONFIG} of an earlier "
                "run to resume")
        gin_files = [saved]
    try:
        parse_config(list(gin_files), list(gin_params),
                     extra_search_path=list(gin_search_path))
    except ConfigError as e:
        return user_error(str(e))
    config_text = gin.config_str()  # before a fallback: config.gin keeps the run's device
    fallbacks = (fall_back_to_cpu(gin_params)
                 if [os.path.abspath(f) for f in gin_files] == [saved] else [])
    try:
        trainer = Trainer(root_dir=root_dir)
    except (ConfigError, ValueError, TypeError) as e:
        return user_error(str(e).strip())
    setup_logging(root_dir)
    logger = logging.getLogger("alf_async")
    for line in fallbacks:
        logger.warning("%s", line)
    if os.path.abspath(gin_files[0]) != saved or len(gin_files) > 1 or gin_params:
        try:
            write_text(saved, config_text)
        except OSError as e:
            return user_error(f"the run could not start: could not write "
                              f"{e.filename or saved}: {e.strerror or e}. Nothing was "
                              f"trained; {_fix_for(e, root_dir)}, then run the same "
                              "command again.")
    try:
        counters = trainer.train()
    except (KeyboardInterrupt, TerminationRequested) as e:
        ctrl_c = isinstance(e, KeyboardInterrupt)
        logger.warning("%s at iteration %d; %s", "interrupted by Ctrl-C" if ctrl_c
                       else "stopped by SIGTERM", trainer.counters["iteration"],
                       _saved_state(trainer))
        return ExitCode.SIGINT if ctrl_c else ExitCode.SIGTERM
    except CheckpointError as e:
        return user_error(str(e))
    except ActorStartupError as e:
        logger.error("the run could not start: %s", e)
        return user_error(f"the run could not start: {e}. Nothing was trained; fix the "
                          "env or module named above and run the same command again.")
    except OSError as e:
        logger.error("run stopped at iteration %d: could not write %s: %s. %s; %s, then "
                     "resume with: python -m alf_async.bin.train --root_dir=%s",
                     trainer.counters["iteration"], e.filename or "a file of the run",
                     e.strerror or e, _intact_state(trainer), _fix_for(e, root_dir),
                     root_dir)
        return ExitCode.FAILED
    except ActorPoolError as e:
        logger.error("run stopped at iteration %d: %s\n%s.", trainer.counters["iteration"],
                     e, _sentence(_saved_state(trainer)))
        return ExitCode.FAILED
    except NonFiniteError as e:
        logger.error("run stopped: %s. The last good checkpoint is kept: %s (nothing of "
                     "the failed iteration was saved); "
                     "lower the learning rate or check the env's observations and "
                     "rewards.", e, trainer.last_checkpoint or "none was written")
        return ExitCode.FAILED
    except Exception as e:  # noqa: BLE001  (report, then a non-zero exit)
        logger.exception("run failed at iteration %d: %s", trainer.counters["iteration"], e)
        return ExitCode.FAILED
    finally:
        _write_operative_config(root_dir, gin.operative_config_str(), logger)
    logger.info("done: %d iterations, %d env steps, %d episodes in %.0f s",
                counters["iteration"], counters["env_steps"], counters["episodes"],
                counters["wall_time"])
    return ExitCode.OK


def _root_dir_problem(root_dir: str) -> Optional[str]:
    """Why ``root_dir`` cannot hold a run (None when it can)."""
    if os.path.exists(root_dir) and not os.path.isdir(root_dir):
        return f"--root_dir={root_dir} is a file, not a folder; give a folder for the run"
    existing = root_dir
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return (f"--root_dir={root_dir} cannot be created: {existing} is a file, not a "
                "folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        return (f"--root_dir={root_dir} cannot be written: {existing} is not writable; "
                "choose a folder you can write to")
    return None


def default_root_dir(gin_files: Sequence[str]) -> str:
    """``runs/<first gin file's stem>-<date>-<time>`` under the working directory."""
    stem = (os.path.splitext(os.path.basename(gin_files[0]))[0] if gin_files else "run")
    return os.path.join("runs", f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}")


def _saved_state(trainer) -> str:
    """What a stopped run left to resume from, said truthfully."""
    if trainer.last_checkpoint:
        if trainer.last_checkpoint_iteration == trainer.counters["iteration"]:
            return f"final checkpoint written: {trainer.last_checkpoint}"
        return f"the newest checkpoint is {trainer.last_checkpoint}"
    if trainer.counters["iteration"] == 0:
        return "no checkpoint was written (no training iteration had finished)"
    return (f"no checkpoint was written (the first was due at iteration "
            f"{trainer.settings.checkpoint_interval}); resuming starts from the beginning")


def _sentence(text: str) -> str:
    """``text`` with its first letter upper-case (the rest, paths included, kept)."""
    return text[:1].upper() + text[1:]


def _intact_state(trainer) -> str:
    """After a failed write: the newest checkpoint that is whole (the one being
    written when the write failed is never left behind), as a sentence."""
    if trainer.last_checkpoint:
        return f"The newest intact checkpoint is {trainer.last_checkpoint}"
    return _sentence(_saved_state(trainer))


def _fix_for(error: OSError, root_dir: str) -> str:
    """What the user does about ``error``, a failed write of a file of the run
    in ``root_dir`` (the advice names the file's folder, which may be on
    another device, e.g. a mounted tensorboard/)."""
    where = os.path.dirname(error.filename) if isinstance(error.filename, str) else root_dir
    if error.errno == errno.ENOSPC:
        return f"free space on the device holding {where} (df -h {where})"
    if error.errno == errno.EDQUOT:
        return f"free space or raise your disk quota on the device holding {where}"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"make {where} writable"
    return f"fix the cause above (free space, or make {where} writable)"


def _write_operative_config(root_dir: str, text: str, logger: logging.Logger) -> None:
    """Write ``operative_config.gin`` (the bindings the run used); a failed write
    is logged as one WARNING line, never raised over the run's own outcome."""
    path = os.path.join(root_dir, "operative_config.gin")
    try:
        write_text(path, text)
    except OSError as e:
        logger.warning("could not write %s: %s (it only records the bindings the "
                       "run used)", e.filename or path, e.strerror or e)


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        sys.exit(user_error(f"unexpected arguments: {' '.join(argv[1:])}"))
    root_dir = FLAGS.root_dir
    if not root_dir:
        if not FLAGS.gin_file:
            sys.exit(user_error("give --gin_file to start a run, or --root_dir of a run to "
                                "resume it"))
        root_dir = default_root_dir(FLAGS.gin_file)
        print(f"alf_async: no --root_dir given; this run goes to {os.path.abspath(root_dir)}"
              f"\nalf_async: resume it with: python -m alf_async.bin.train "
              f"--root_dir={root_dir}",
              file=sys.stderr, flush=True)
    sys.exit(train(root_dir, FLAGS.gin_file or [], FLAGS.gin_param or [],
                   FLAGS.gin_search_path or []))


def run_main() -> None:
    run_command(main)


if __name__ == "__main__":
    run_main()
