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
from typing import List, Sequence

from absl import flags

from alf_async.bin.common import ExitCode, run_command, setup_logging, user_error

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", None, "gin file(s): a path or a bare name on the "
                          "gin search path")
flags.DEFINE_multi_string("gin_param", None, "gin binding, e.g. 'Trainer.num_actors=2'")
flags.DEFINE_multi_string("gin_search_path", None, "a folder searched for gin files and "
                          "includes after the package's gin_configs/ (repeatable)")
flags.DEFINE_string("root_dir", None, "run directory (resumed if it exists; default: "
                    "runs/<gin file>-<date>-<time> under the working directory)")
flags.DEFINE_bool("allow_config_change", False, "resume even though the command changes "
                  "what the run learns (env, networks, algorithm, hyperparameters); the "
                  "change is logged and kept in <root_dir>/config_changes.jsonl")


def train(root_dir: str, gin_files: Sequence[str] = (), gin_params: Sequence[str] = (),
          gin_search_path: Sequence[str] = (), allow_config_change: bool = False) -> int:
    """Parse the config, train, and return the process exit status (the steps
    are ``training.launch``'s, shared with ``alf_async.train``).

    The run directory is locked for the run (a second training on it exits 2
    naming the holder); resuming a run checks the command's bindings against
    its config.gin: changes to how the run is carried out are applied and
    logged, changes to what it learns exit 2 unless ``allow_config_change``.
    """
    from alf_async.training.launch import prepare_run

    try:
        run = prepare_run(root_dir, gin_files, gin_params, gin_search_path,
                          allow_config_change=allow_config_change)
    except (ValueError, TypeError) as e:  # RunDirError, ConfigError, the settings' checks
        return user_error(str(e).strip())
    try:
        return _train_prepared(run)
    finally:
        run.release()


def _train_prepared(run) -> int:
    """Train a prepared run (``training.launch.PreparedRun``, its directory
    locked); returns the exit status."""
    import gin

    from alf_async.training.launch import (RUN_CONFIG, announce_run, log_finished,
                                           save_run_config, write_operative_config)

    from alf_async.algorithms.guarded_step import NonFiniteError
    from alf_async.checkpoint import CheckpointError
    from alf_async.runtime.actor_pool import ActorPoolError, ActorStartupError
    from alf_async.signals import TerminationRequested

    trainer, root_dir = run.trainer, run.root_dir
    setup_logging(root_dir)
    logger = logging.getLogger("alf_async")
    announce_run(run, logger)
    try:
        save_run_config(run)
    except OSError as e:
        where = e.filename or os.path.join(root_dir, RUN_CONFIG)
        return user_error(f"the run could not start: could not write {where}: "
                          f"{e.strerror or e}. Nothing was trained; "
                          f"{_fix_for(e, root_dir)}, then run the same command again.")
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
        return user_error(f"the run could not start: {e}. Nothing was trained; fix what is "
                          "named above and run the same command again.")
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
        write_operative_config(root_dir, gin.operative_config_str(), logger)
    log_finished(counters, logger)
    return ExitCode.OK


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
                   FLAGS.gin_search_path or [], FLAGS.allow_config_change))


def run_main() -> None:
    run_command(main)


if __name__ == "__main__":
    run_main()
