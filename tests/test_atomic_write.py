"""utils.files.atomic_write: the replaced file has the permissions a plain
``open`` gives (mkstemp's 0600 would hide checkpoints, configs and exported
policies from the other users of a shared run directory)."""

import os
import stat

import pytest

from alf_async.utils.files import atomic_write, write_text


@pytest.fixture
def umask():
    """Set the process's umask for one test and restore it after."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_a_new_file_gets_the_mode_open_would_give_it(tmp_path, umask, mask):
    umask(mask)
    with open(tmp_path / "plain", "w"):
        pass
    write_text(str(tmp_path / "atomic"), "x")
    with atomic_write(str(tmp_path / "binary"), "wb") as f:
        f.write(b"x")
    want = stat.S_IMODE((tmp_path / "plain").stat().st_mode)
    assert want == 0o666 & ~mask
    assert stat.S_IMODE((tmp_path / "atomic").stat().st_mode) == want
    assert stat.S_IMODE((tmp_path / "binary").stat().st_mode) == want


def test_a_replaced_file_keeps_its_own_mode(tmp_path, umask):
    umask(0o022)
    target = tmp_path / "kept"
    target.write_text("old")
    target.chmod(0o640)
    write_text(str(target), "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
