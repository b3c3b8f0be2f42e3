"""Named blocks of shared memory holding several numpy arrays.

A ``SharedArrays`` block is one file in ``/dev/shm`` (a tmpfs on Linux) mapped into
every process that uses it. The creating process owns the block and unlinks it on
``close()``; other processes ``attach()`` by name and only unmap it. We manage the
files ourselves instead of using ``multiprocessing.shared_memory`` so that attaching
processes do not register the block with Python's resource tracker (which, before
Python 3.13, unlinks or warns about blocks it does not own).

Block names are ``alfa_<owner pid>_<random>``. ``list_blocks()`` lets tests check
for leaks.

How a block leaves /dev/shm:

- a block's owner unlinks it in ``close()`` (or at exit, through a finalizer).
  A child process (actor, Hogwild worker) does so also when its parent dies:
  it gets SIGTERM then (``utils.process.init_child_process``);
- a block created by a top-level process (the trainer: weight store,
  trajectory slots, replay buffer) is also registered with Python's
  multiprocessing resource tracker, the one process every run already has (the
  'spawn' start method launches it with the first child, and every spawned
  descendant, actors, env workers and Hogwild workers, inherits the write end
  of its pipe). The tracker reads until every process holding that pipe has
  exited and then unlinks what is still registered: when the trainer is killed
  with SIGKILL, its blocks go once its last child has ended (a second or so),
  without waiting for a next run. The tracker then prints "There appear to be
  N leaked shared_memory objects to clean up at shutdown": that is this
  clean-up. Every unlink here unregisters the name, so an orderly run prints
  nothing;
- ``sweep_stale_blocks()`` removes blocks whose owner process no longer exists
  (blocks of an actor killed mid-run, or of a run whose tracker was killed too,
  e.g. by SIGKILL to the whole process group), so that the next run starts clean.

Children do not register their blocks: their parent's sweep (or another run's)
removes them when they die, and the tracker, which cannot learn of an unlink
by another run, would then warn about a block already gone. Attaching
processes never register or unregister a block.
"""

from __future__ import annotations

import mmap
import multiprocessing
import os
import secrets
import tempfile
import weakref
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Dict, Iterator, List, Mapping, Optional, Tuple, Type, TypeVar

import numpy as np

from alf_async.utils.process import pid_alive

BLOCK_PREFIX = "alfa_"
_ALIGN = 64
# The resource tracker's type whose clean-up is shm_unlink (/dev/shm/<name>).
_TRACKER_TYPE = "shared_memory"


def shm_directory() -> str:
    """The directory holding shared-memory files: /dev/shm when it exists."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


@dataclass(frozen=True)
class ArraySpec:
    """Shape and dtype of one array of a block."""

    shape: Tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def _layout(specs: Mapping[str, ArraySpec]) -> Tuple[Dict[str, int], int]:
    offsets, offset = {}, 0
    for name, spec in specs.items():
        offsets[name] = offset
        offset += (spec.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    return offsets, max(offset, _ALIGN)


class SharedArrays:
    """A set of named numpy arrays living in one shared-memory block.

    Use ``SharedArrays.create(specs)`` in the owner and
    ``SharedArrays.attach(name, specs)`` elsewhere; ``arrays[name]`` is a numpy
    view on the shared bytes. The spec dict (picklable) travels to other processes
    together with ``name``.
    """

    def __init__(self, name: str, specs: Mapping[str, ArraySpec], owner: bool,
                 fd: int, size: int):
        self.name = name
        self.specs = dict(specs)
        self.owner = owner
        self._size = size
        self._mmap: Optional[mmap.mmap] = mmap.mmap(fd, size)
        os.close(fd)
        offsets, _ = _layout(self.specs)
        self.arrays: Dict[str, np.ndarray] = {}
        for key, spec in self.specs.items():
            count = int(np.prod(spec.shape, dtype=np.int64))
            self.arrays[key] = np.frombuffer(
                self._mmap, dtype=spec.dtype, count=count,
                offset=offsets[key]).reshape(spec.shape)
        if owner:
            # Safety net (runs at interpreter exit or garbage collection) for
            # paths where close() is never called explicitly.
            self._finalizer = weakref.finalize(self, _release, self.path)

    @property
    def path(self) -> str:
        return os.path.join(shm_directory(), self.name)

    @classmethod
    def create(cls, specs: Mapping[str, ArraySpec], tag: str = "") -> "SharedArrays":
        """Create and zero a new block owned by the calling process."""
        _, size = _layout(specs)
        suffix = f"{tag}_" if tag else ""
        name = f"{BLOCK_PREFIX}{os.getpid()}_{suffix}{secrets.token_hex(4)}"
        path = os.path.join(shm_directory(), name)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            _track(path)
            os.ftruncate(fd, size)
        except BaseException:
            os.close(fd)
            _release(path)
            raise
        return cls(name, specs, owner=True, fd=fd, size=size)

    @classmethod
    def attach(cls, name: str, specs: Mapping[str, ArraySpec]) -> "SharedArrays":
        """Map an existing block created by another process."""
        path = os.path.join(shm_directory(), name)
        fd = os.open(path, os.O_RDWR)
        size = os.fstat(fd).st_size
        expected = _layout(specs)[1]
        if size != expected:
            os.close(fd)
            raise ValueError(
                f"shared-memory block {name} has {size} bytes, expected {expected}")
        return cls(name, specs, owner=False, fd=fd, size=size)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def close(self) -> None:
        """Unmap the block; the owner also unlinks it. Safe to call twice."""
        if self.owner:
            _release(self.path)
            self._finalizer.detach()
        self.arrays = {}
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                # Someone still holds a numpy view; the mapping ends with the
                # process. The file itself is already unlinked.
                pass
            self._mmap = None


_Holder = TypeVar("_Holder", bound="SharedBlockHolder")


class SharedBlockHolder:
    """Base of the objects that give one ``SharedArrays`` block a meaning
    (trajectory slots, the weight store, the replay buffer): the block, its
    name and specs (what another process needs to ``attach``), and ``close``.
    A subclass's ``__init__(block)`` reads what it needs from the block, and its
    own ``create`` builds the specs."""

    def __init__(self, block: SharedArrays):
        self.block = block

    @classmethod
    def attach(cls: Type[_Holder], name: str, specs: Mapping[str, ArraySpec]) -> _Holder:
        """The holder of the block ``name`` created by another process."""
        return cls(SharedArrays.attach(name, specs))

    @property
    def name(self) -> str:
        return self.block.name

    @property
    def specs(self) -> Dict[str, ArraySpec]:
        return self.block.specs

    def close(self) -> None:
        """Unmap the block (the owner also unlinks it). Safe to call twice."""
        self.block.close()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _tracker_name(path: str) -> Optional[str]:
    """The name under which the resource tracker knows the block file ``path``
    ("/<name>", what shm_unlink takes); None where blocks are not in /dev/shm
    (the tracker could not unlink them)."""
    directory, name = os.path.split(path)
    return "/" + name if directory == "/dev/shm" else None


def _track(path: str) -> None:
    """Register the block file ``path`` of a top-level process (see the module
    docstring) with its resource tracker (started if needed), which unlinks it
    once every process of the run has ended. Best effort: without a tracker
    the sweep of a later run remains."""
    name = _tracker_name(path)
    if name is None or multiprocessing.parent_process() is not None:
        return
    try:
        resource_tracker.register(name, _TRACKER_TYPE)
    except Exception:  # noqa: BLE001 - an optional safety net
        pass


def _untrack(path: str) -> None:
    """Make the resource tracker forget the block file ``path``.

    Sends REGISTER then UNREGISTER in one write: the pair leaves the name
    unregistered whether or not it was registered (a bare UNREGISTER of an
    unknown name makes the tracker print a KeyError traceback), which lets a
    sweep forget the blocks of dead processes of this run and of other runs
    alike. The write goes straight to the tracker's pipe (one write of less than
    PIPE_BUF bytes is atomic), without the tracker module's lock or its relaunch
    of a dead tracker: this also runs in finalizers and after the emergency
    exit has killed the tracker. Nothing is sent by a process without a tracker.
    """
    name = _tracker_name(path)
    tracker = getattr(resource_tracker, "_resource_tracker", None)
    fd = getattr(tracker, "_fd", None)
    if name is None or fd is None:
        return
    message = (f"REGISTER:{name}:{_TRACKER_TYPE}\n"
               f"UNREGISTER:{name}:{_TRACKER_TYPE}\n").encode("ascii")
    try:
        os.write(fd, message)
    except OSError:
        pass  # the tracker is gone: nothing left to forget


def _release(path: str) -> None:
    """Unlink the block file ``path`` (if still there) and untrack it."""
    _unlink_quietly(path)
    _untrack(path)


def list_blocks(owner_pid: Optional[int] = None) -> List[str]:
    """Names of alf_async blocks present now (optionally of one owner pid)."""
    prefix = BLOCK_PREFIX if owner_pid is None else f"{BLOCK_PREFIX}{owner_pid}_"
    try:
        return sorted(n for n in os.listdir(shm_directory()) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def block_owner_pid(name: str) -> Optional[int]:
    """The pid of the process that created block ``name`` (None if not ours)."""
    try:
        return int(name[len(BLOCK_PREFIX):].split("_", 1)[0])
    except ValueError:
        return None


def sweep_stale_blocks(include_own: bool = False) -> List[str]:
    """Unlink blocks whose owner process is gone; returns the names removed.

    With ``include_own`` this process's own blocks go too (an emergency exit that
    will not run their owners' ``close()``). The resource tracker of this process
    forgets each removed block (a dead child's block may be registered there).
    """
    removed = []
    for name in list_blocks():
        pid = block_owner_pid(name)
        if pid is not None and (not pid_alive(pid) or (include_own and pid == os.getpid())):
            _release(os.path.join(shm_directory(), name))
            removed.append(name)
    return removed


def iter_specs(arrays: Mapping[str, np.ndarray]) -> Iterator[Tuple[str, ArraySpec]]:
    """Specs describing existing arrays, e.g. to allocate a matching block."""
    for key, value in arrays.items():
        yield key, ArraySpec(tuple(value.shape), value.dtype.str)
