"""The WeightStore: versioned, tear-free weights in shared memory.

Proves that
- a reader never sees torn data: a writer process publishes arrays whose every
  element equals the version while readers (this process and a reader process)
  check that every element of every array they got equals the version returned
  with it, and that versions only go forward;
- ``read_newer`` returns None when nothing newer is published (also after
  waiting ``timeout_s``), returns a copy independent of the store, and returns a
  version published by another process while it waits;
- versions start at -1 (empty) and follow ``publish``;
- ``close`` releases the shared-memory block (it is gone from /dev/shm and can no
  longer be attached).
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from alf_async.utils.shared_memory import list_blocks, shm_directory
from alf_async.runtime.weight_store import WeightStore, weights_digest
from alf_async.utils.process import mp_context, stop_processes

# Big enough that copying takes far longer than publishing's bookkeeping, so
# reads and writes overlap many times.
SHAPES = {"param/a": (256, 256), "param/b": (50_000,), "normalizer/count": (7,)}
DTYPES = {"param/a": np.float32, "param/b": np.float64, "normalizer/count": np.int64}
READS = 300  # versions each reader checks
MAX_VERSIONS = 1_000_000  # the writer's bound if the test fails to stop it


def arrays_of(version: int):
    return {k: np.full(SHAPES[k], version, DTYPES[k]) for k in SHAPES}


def check_consistent(version, arrays) -> None:
    assert set(arrays) == set(SHAPES)
    for key, value in arrays.items():
        assert value.shape == SHAPES[key]
        if not (value == version).all():
            seen = np.unique(value)
            raise AssertionError(f"torn read: version {version} but {key} holds {seen[:5]}")


def writer_main(name, specs, started, stop):
    """Publish versions 1, 2, ... until ``stop`` is set."""
    store = WeightStore.attach(name, specs)
    try:
        started.set()
        v = 0
        while not stop.is_set() and v < MAX_VERSIONS:
            v += 1
            store.publish(arrays_of(v), v)
    finally:
        store.close()


def read_many(store, reads_wanted):
    """Read newer versions until ``reads_wanted`` reads; checks each one."""
    known, versions = 0, []
    while len(versions) < reads_wanted:
        got = store.read_newer(known, timeout_s=60.0)
        assert got is not None, f"no version newer than {known} within 60 s"
        version, arrays = got
        check_consistent(version, arrays)
        assert version > known, f"version went from {known} to {version}"
        known = version
        versions.append(version)
    return versions


def reader_main(name, specs, reads_wanted, conn):
    store = WeightStore.attach(name, specs)
    try:
        conn.send(("ok", read_many(store, reads_wanted)))
    except AssertionError as e:
        conn.send(("error", str(e)))
    finally:
        store.close()


@pytest.fixture
def store():
    s = WeightStore.create(arrays_of(0))
    yield s
    s.close()


def test_new_store_is_empty_and_versions_follow_publish(store):
    assert store.version == -1
    assert store.read_newer(-1) is None
    store.publish(arrays_of(0), 0)
    assert store.version == 0
    version, arrays = store.read_newer(-1)
    assert version == 0
    check_consistent(0, arrays)
    store.publish(arrays_of(5), 5)
    assert store.version == 5
    version, arrays = store.read_newer(0)
    assert version == 5
    check_consistent(5, arrays)
    assert weights_digest(arrays) == weights_digest(arrays_of(5))
    assert weights_digest(arrays) != weights_digest(arrays_of(0))


def test_read_newer_returns_none_when_nothing_newer(store):
    store.publish(arrays_of(3), 3)
    assert store.read_newer(3) is None
    assert store.read_newer(7) is None
    # Waiting does not change that: it waits, then gives up.
    assert store.read_newer(3, timeout_s=0.2) is None
    # A newer version is still found afterwards.
    store.publish(arrays_of(4), 4)
    assert store.read_newer(3)[0] == 4


def test_read_returns_a_private_copy(store):
    store.publish(arrays_of(1), 1)
    _, arrays = store.read_newer(-1)
    arrays["param/a"][:] = 99  # writing the copy leaves the store alone
    check_consistent(1, store.read_newer(-1)[1])
    store.publish(arrays_of(2), 2)  # publishing leaves earlier copies alone
    assert (arrays["param/b"] == 1).all() and (arrays["param/a"] == 99).all()


def test_read_newer_waits_for_a_version_published_meanwhile(store):
    store.publish(arrays_of(0), 0)
    timer = threading.Timer(0.3, lambda: store.publish(arrays_of(1), 1))
    timer.start()
    try:
        got = store.read_newer(0, timeout_s=30.0)
    finally:
        timer.join()
    assert got is not None and got[0] == 1
    check_consistent(1, got[1])


def test_read_newer_timeout_holds_while_a_write_is_stuck(store):
    """A writer that died half-way (odd sequence counter) must not make a
    reader with a timeout spin forever; it gets None, never the torn arrays."""
    store.publish(arrays_of(0), 0)
    store.block.arrays["__meta__"][0] += 1  # write in progress ...
    store.block.arrays["__meta__"][1] = 1   # ... of version 1
    result = []
    reader = threading.Thread(target=lambda: result.append(store.read_newer(0, 0.2)),
                              daemon=True)
    reader.start()
    reader.join(20.0)
    hung = reader.is_alive()
    store.block.arrays["__meta__"][0] += 1  # let a hung reader finish
    reader.join(20.0)
    assert not hung, "read_newer ignored its timeout while a write was in progress"
    assert result == [None]


def test_attached_store_sees_published_versions(store):
    other = WeightStore.attach(store.name, store.specs)
    try:
        assert other.read_newer(-1) is None
        store.publish(arrays_of(8), 8)
        assert other.version == 8
        version, arrays = other.read_newer(-1)
        assert version == 8
        check_consistent(8, arrays)
    finally:
        other.close()
    # Closing an attached (non-owner) store leaves the block to its owner.
    assert store.name in list_blocks()


def test_no_torn_reads_while_another_process_publishes(store):
    """One writer process publishing non-stop, a reader process and this
    process reading until each has checked READS versions."""
    store.publish(arrays_of(0), 0)
    ctx = mp_context()
    started, stop = ctx.Event(), ctx.Event()
    reader_conn, child_conn = ctx.Pipe(duplex=False)
    reader = ctx.Process(target=reader_main,
                         args=(store.name, store.specs, READS, child_conn))
    writer = ctx.Process(target=writer_main, args=(store.name, store.specs, started, stop))
    try:
        reader.start()
        child_conn.close()
        writer.start()
        assert started.wait(60.0), "writer process did not start"
        versions = read_many(store, READS)
        assert reader_conn.poll(120.0), "reader process sent no result"
        status, reader_versions = reader_conn.recv()
        assert status == "ok", reader_versions
        stop.set()
        writer.join(60.0)
        reader.join(60.0)
        assert writer.exitcode == 0 and reader.exitcode == 0
    finally:
        stop.set()
        stop_processes([writer, reader], grace_s=5.0)
        reader_conn.close()
    assert len(versions) == len(reader_versions) == READS


def test_close_releases_the_block():
    store = WeightStore.create(arrays_of(0))
    name, specs = store.name, store.specs
    assert name in list_blocks(os.getpid())
    store.close()
    assert name not in list_blocks()
    assert not os.path.exists(os.path.join(shm_directory(), name))
    with pytest.raises(FileNotFoundError):
        WeightStore.attach(name, specs)
    store.close()  # a second close is harmless
