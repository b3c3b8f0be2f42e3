"""Export a trained policy as a TorchScript or ONNX file that runs without alf_async.

    python -m alf_async.bin.export --root_dir=runs/demo --format=onnx \\
        --output=runs/demo/policy.onnx

Loads the run's ``config.gin`` and a checkpoint (default: the newest in
``<root_dir>/checkpoints``; ``--checkpoint`` takes a path or a file name in
that directory) and writes the policy's deterministic action (the mean of the
action distribution, or its most likely choice) as one file:

- input ``observation`` [B, *obs]: a batch of raw observations as the run's env
  gives them (uint8 frames stay uint8); the checkpoint's observation
  normalizer is built in;
- output ``action`` [B, *act]: actions as the env's ``step`` takes them
  (continuous ones scaled to the env's bounds; discrete ones as int64 indices);
- a recurrent policy also takes ``state`` [B, S] (zeros at an episode's start)
  and returns ``next_state`` [B, S].

``--format=torchscript`` (default ``--output``: ``<root_dir>/policy.pt``) is
loaded with ``torch.jit.load``; ``--format=onnx`` (``<root_dir>/policy.onnx``)
runs with onnxruntime and needs the packages of alf_async's ``export`` extra.
docs/python_api.md shows both in use.

Exit status: 0 done; 2 bad input (no run directory, no checkpoint, an
unusable checkpoint, ONNX without its packages, an output file that cannot be
written); 1 an unexpected failure.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from absl import flags

from alf_async.bin.common import ExitCode, run_command, user_error

FLAGS = flags.FLAGS
COMMAND = "alf_async.export"
SUFFIXES = {"torchscript": ".pt", "onnx": ".onnx"}


def define_flags() -> None:
    """The command's flags (defined at start-up, not import)."""
    flags.DEFINE_string("root_dir", None, "the run directory")
    flags.DEFINE_string("checkpoint", None, "checkpoint file (default: the newest)")
    flags.DEFINE_string("format", "torchscript", "the file's format: torchscript or onnx")
    flags.DEFINE_string("output", None, "the file to write (default: <root_dir>/policy.pt "
                        "or policy.onnx)")


def export(root_dir: str, output: Optional[str] = None, format: str = "torchscript",
           checkpoint: Optional[str] = None) -> int:
    """Write the policy of a run's checkpoint to ``output``; returns the exit status."""
    from alf_async.playback.player import PlayError, load_run
    from alf_async.playback.export import ExportError, check_format, describe_io, export_policy

    root_dir = os.path.abspath(root_dir)
    output = output or os.path.join(root_dir, "policy" + SUFFIXES.get(format, ""))
    try:
        check_format(format)  # before the run is loaded
        run = load_run(root_dir, checkpoint)
        path = export_policy(run, output, format)
    except (PlayError, ExportError) as e:
        return user_error(str(e), command=COMMAND)
    except OSError as e:
        return user_error(f"could not write {os.path.abspath(output)}: {e.strerror or e}; "
                          "give an --output in a folder you can write to", command=COMMAND)
    print(f"checkpoint: {run.checkpoint}; env: {run.run_env.env_name}")
    print(f"wrote {format} to {path}")
    print(describe_io(run))
    return ExitCode.OK


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        sys.exit(user_error(f"unexpected arguments: {' '.join(argv[1:])}", command=COMMAND))
    if not FLAGS.root_dir:
        sys.exit(user_error("--root_dir is required", command=COMMAND))
    sys.exit(export(FLAGS.root_dir, FLAGS.output, FLAGS.format, FLAGS.checkpoint))


def run_main() -> None:
    define_flags()
    run_command(main)


if __name__ == "__main__":
    run_main()
