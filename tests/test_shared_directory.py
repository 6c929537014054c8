"""Where MPI shared buffers make their parts (ring.mpi.shared.shared_directory), without MPI:
``RING_SHM_DIR`` when set (as an absolute path, since the ranks map each other's parts by
it), refused when it is not a writable directory, else ``/dev/shm``."""

from __future__ import annotations

import os

import pytest

from ring.mpi.shared import SHM_DIR_ENV, shared_directory


def test_the_chosen_directory_is_made_absolute(tmp_path, monkeypatch):
    (tmp_path / "parts").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(SHM_DIR_ENV, "parts")
    assert shared_directory() == str(tmp_path / "parts")


@pytest.mark.parametrize("kind", ["missing", "a file"])
def test_a_chosen_path_that_is_no_directory_is_refused(tmp_path, monkeypatch, kind):
    path = tmp_path / "x"
    if kind == "a file":
        path.write_text("")
    monkeypatch.setenv(SHM_DIR_ENV, str(path))
    with pytest.raises(ValueError, match=f"^{SHM_DIR_ENV}=.*x is not a directory this user"):
        shared_directory()


def test_unset_or_empty_means_dev_shm(monkeypatch):
    if not os.access("/dev/shm", os.W_OK | os.X_OK):
        pytest.skip("no writable /dev/shm on this machine")
    monkeypatch.delenv(SHM_DIR_ENV, raising=False)
    assert shared_directory() == "/dev/shm"
    monkeypatch.setenv(SHM_DIR_ENV, "")
    assert shared_directory() == "/dev/shm"
