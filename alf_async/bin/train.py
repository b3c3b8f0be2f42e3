"""Train PPO2 from gin files.

    python -m alf_async.bin.train --gin_file=ppo_bullet_humanoid.gin --root_dir=RUN
    python -m alf_async.bin.train --root_dir=RUN          # resume RUN

``--gin_file`` takes a path or a bare name looked up in the current directory,
the project's gin_configs/, then $ALF_ASYNC_CONFIG_PATH. ``--gin_param`` adds
bindings (repeatable). Running again with the same ``--root_dir`` resumes from its
newest checkpoint; without ``--gin_file`` it reuses the run's saved config.

Exit status: 0 done; 2 bad input (configuration, files); 1 the run failed;
130 interrupted by Ctrl-C; 143 stopped by SIGTERM. A final checkpoint is written
on interrupts.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import List, Optional, Sequence

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_multi_string("gin_file", None, "gin file(s): a path or a bare name on the "
                          "gin search path")
flags.DEFINE_multi_string("gin_param", None, "gin binding, e.g. 'Trainer.num_actors=2'")
flags.DEFINE_string("root_dir", None, "run directory (resumed if it exists)")

EXIT_BAD_INPUT = 2
EXIT_FAILED = 1
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
RUN_CONFIG = "config.gin"


def setup_logging(root_dir: Optional[str]) -> None:
    """Log INFO to stderr and, with a run directory, to <root_dir>/log.txt."""
    logger = logging.getLogger("alf_async")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(fmt)
    logger.addHandler(stream)
    if root_dir:
        os.makedirs(root_dir, exist_ok=True)
        file_handler = logging.FileHandler(os.path.join(root_dir, "log.txt"))
        file_handler.setFormatter(fmt)
        logger.addHandler(file_handler)


def user_error(message: str) -> int:
    """Print a one-paragraph error (without gin's call-chain notes); exit code 2."""
    lines = [line for line in str(message).strip().splitlines()
             if not line.strip().startswith("In call to configurable")]
    print(f"alf_async: error: {' '.join(l.strip() for l in lines)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def train(root_dir: str, gin_files: Sequence[str] = (), gin_params: Sequence[str] = ()) -> int:
    """Parse the config, train, and return the process exit status."""
    import gin

    from alf_async.checkpoint import CheckpointError
    from alf_async.config import ConfigError, parse_config
    from alf_async.algorithms.ppo_learner import NonFiniteError
    from alf_async.runtime.actor_pool import ActorPoolError
    from alf_async.trainer import TerminationRequested, Trainer

    root_dir = os.path.abspath(root_dir)
    saved = os.path.join(root_dir, RUN_CONFIG)
    if not gin_files:
        if not os.path.isfile(saved):
            return user_error(
                f"--gin_file is required: {root_dir} holds no {RUN_CONFIG} of an earlier "
                "run to resume")
        gin_files = [saved]
    try:
        parse_config(list(gin_files), list(gin_params))
    except ConfigError as e:
        return user_error(str(e))
    try:
        trainer = Trainer(root_dir=root_dir)
    except (ConfigError, ValueError, TypeError) as e:
        return user_error(str(e).strip())
    setup_logging(root_dir)
    logger = logging.getLogger("alf_async")
    config_text = gin.config_str()
    if os.path.abspath(gin_files[0]) != saved or len(gin_files) > 1 or gin_params:
        _write_text(saved, config_text)
    try:
        counters = trainer.train()
    except KeyboardInterrupt:
        logger.warning("interrupted by Ctrl-C at iteration %d; final checkpoint written",
                       trainer.counters["iteration"])
        return EXIT_SIGINT
    except TerminationRequested:
        logger.warning("stopped by SIGTERM at iteration %d; final checkpoint written",
                       trainer.counters["iteration"])
        return EXIT_SIGTERM
    except CheckpointError as e:
        return user_error(str(e))
    except ActorPoolError as e:
        logger.error("run stopped at iteration %d: %s\nThe last checkpoint is in %s.",
                     trainer.counters["iteration"], e, trainer.checkpointer.directory)
        return EXIT_FAILED
    except NonFiniteError as e:
        logger.error("run stopped: %s. The last good checkpoint (before this iteration) "
                     "is kept in %s; lower the learning rate or check the env's "
                     "observations and rewards.", e, trainer.checkpointer.directory)
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001  (report, then a non-zero exit)
        logger.exception("run failed at iteration %d: %s", trainer.counters["iteration"], e)
        return EXIT_FAILED
    finally:
        _write_text(os.path.join(root_dir, "operative_config.gin"), gin.operative_config_str())
    logger.info("done: %d iterations, %d env steps, %d episodes in %.0f s",
                counters["iteration"], counters["env_steps"], counters["episodes"],
                counters["wall_time"])
    return 0


def _write_text(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        sys.exit(user_error(f"unexpected arguments: {' '.join(argv[1:])}"))
    if not FLAGS.root_dir:
        sys.exit(user_error("--root_dir is required"))
    sys.exit(train(FLAGS.root_dir, FLAGS.gin_file or [], FLAGS.gin_param or []))


def run_main() -> None:
    app.run(main)


if __name__ == "__main__":
    run_main()
