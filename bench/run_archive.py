"""Carry a stopped run to another machine: one small archive of what it needs
to resume, and back.

A long benchmark run (the humanoid's: hours, over several sessions) resumes
from its run directory. Where a later session may start on a fresh machine
that keeps only the repository, the run goes with it as an archive:

    python -m bench.run_archive pack --run_dir RUN --archive FILE.tar.gz
    python -m bench.run_archive unpack --archive FILE.tar.gz --root_dir ROOT

``pack`` takes everything in the run directory but the older checkpoints and
the lock file (settings, log, metrics rows, TensorBoard files, config changes,
the newest checkpoint), each under the run's directory name; a humanoid run's
archive is a few hundred KB. It refuses a run that a live process holds
(``utils.run_lock``): a run is packed stopped, at a checkpoint. ``unpack``
extracts it into ROOT/<name> (tarfile's "data" filter: no absolute paths,
links out of the directory or device files) and refuses to write over a run
directory that has checkpoints. The train command (or the bench that
started the run) then resumes it from ROOT/<name> as from the original.

Each command prints one JSON line: the files, their bytes and the checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
from typing import Dict, List, Tuple

from alf_async.checkpoint import Checkpointer
from alf_async.utils import run_lock

#: Files of a run directory an archive leaves out (``run.lock``: who held it).
LEFT_OUT = (run_lock.LOCK_FILE,)


class ArchiveError(RuntimeError):
    """A run that cannot be packed or unpacked; the message says why."""


def _checkpoints(run_dir: str) -> List[Tuple[int, str]]:
    """(iteration, path) of the run's complete checkpoints, oldest first
    (none where it has no checkpoints folder)."""
    if not os.path.isdir(os.path.join(run_dir, "checkpoints")):
        return []
    return Checkpointer(run_dir).list()


def _files_to_pack(run_dir: str) -> Tuple[List[str], str]:
    """(paths relative to ``run_dir`` of every file but ``LEFT_OUT`` and the
    checkpoints older than the newest, the newest checkpoint's name)."""
    checkpoints = _checkpoints(run_dir)
    if not checkpoints:
        raise ArchiveError(f"run directory {run_dir} has no checkpoint to resume from")
    older = {path for _, path in checkpoints[:-1]}
    files = []
    for folder, _, names in os.walk(run_dir):
        for name in names:
            path = os.path.join(folder, name)
            if ((folder == run_dir and name in LEFT_OUT) or path in older
                    or not os.path.isfile(path)):
                continue
            files.append(os.path.relpath(path, run_dir))
    return sorted(files), os.path.basename(checkpoints[-1][1])


def pack(run_dir: str, archive: str) -> Dict:
    """Write ``archive`` (.tar.gz) from the stopped run in ``run_dir``."""
    run_dir = os.path.abspath(run_dir)
    if not os.path.isdir(run_dir):
        raise ArchiveError(f"run directory {run_dir} does not exist")
    holder = run_lock.holder(run_dir)
    if holder is not None:
        raise ArchiveError(f"run directory {run_dir} is in use by {holder.describe()}; "
                           "stop the run (SIGTERM writes a checkpoint) and pack it then")
    files, newest = _files_to_pack(run_dir)
    name = os.path.basename(run_dir)
    partial = archive + ".partial"
    os.makedirs(os.path.dirname(os.path.abspath(archive)), exist_ok=True)
    with tarfile.open(partial, "w:gz") as tar:
        for rel in files:
            tar.add(os.path.join(run_dir, rel), arcname=os.path.join(name, rel),
                    recursive=False)
    os.replace(partial, archive)
    return {"packed": run_dir, "archive": archive, "files": len(files),
            "bytes": os.path.getsize(archive),
            "checkpoint": newest}


def unpack(archive: str, root_dir: str) -> Dict:
    """Extract ``archive`` into ``root_dir``; the run lands in root_dir/<name>."""
    if not os.path.isfile(archive):
        raise ArchiveError(f"archive {archive} does not exist")
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        names = {m.name.split("/", 1)[0] for m in members}
        if len(names) != 1:
            raise ArchiveError(f"archive {archive} holds {sorted(names)}: one run "
                               "directory expected (made by bench.run_archive pack)")
        run_dir = os.path.join(os.path.abspath(root_dir), names.pop())
        if _checkpoints(run_dir):
            raise ArchiveError(f"run directory {run_dir} already has checkpoints; unpack "
                               "into another --root_dir or move that run away first")
        os.makedirs(root_dir, exist_ok=True)
        tar.extractall(root_dir, filter="data")
    checkpoints = _checkpoints(run_dir)
    return {"unpacked": run_dir, "archive": archive, "files": len(members),
            "checkpoint": os.path.basename(checkpoints[-1][1]) if checkpoints else None}


def main(argv: List[str] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("pack", "unpack"),
                        help="pack: archive a stopped run; unpack: restore a run")
    parser.add_argument("--archive", required=True, help="the .tar.gz written or read")
    parser.add_argument("--run_dir", help="pack: the run directory")
    parser.add_argument("--root_dir", help="unpack: where the run directory is made "
                                           "(ROOT/<name>)")
    args = parser.parse_args(argv)
    needed = "run_dir" if args.command == "pack" else "root_dir"
    if getattr(args, needed) is None:
        parser.error(f"{args.command} needs --{needed}")
    try:
        result = (pack(args.run_dir, args.archive) if args.command == "pack"
                  else unpack(args.archive, args.root_dir))
    except ArchiveError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
