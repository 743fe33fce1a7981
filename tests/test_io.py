"""Atomic writes: the old file or the new one, never half of one; readable like any file the user writes."""

from __future__ import annotations

import math
import os
import stat

import pytest

from poslab.io import number_or_nan, read_json, write_atomic, write_json_atomic


def test_write_atomic_replaces_whole_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "results.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2})
    assert read_json(path) == {"a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["results.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = write_atomic(tmp_path / "table.md", "old")

    def disk_full(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "new")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["table.md"]


def test_written_files_follow_the_umask_not_mkstemps_private_mode(tmp_path):
    old = os.umask(0o022)
    try:
        mode = stat.S_IMODE(write_atomic(tmp_path / "plot.png", b"png").stat().st_mode)
    finally:
        os.umask(old)
    assert mode == 0o644


def test_a_number_written_as_null_reads_back_as_nan_and_a_finite_one_unchanged(tmp_path):
    path = write_json_atomic(tmp_path / "summary.json", {"mean": float("nan"), "low": float("inf"), "high": 2.5})
    saved = read_json(path)
    assert saved == {"mean": None, "low": None, "high": 2.5}  # strict JSON: no NaN, no Infinity
    assert math.isnan(number_or_nan(saved["mean"])) and math.isnan(number_or_nan(saved["low"]))
    assert number_or_nan(saved["high"]) == 2.5 and isinstance(number_or_nan(3), float)


def test_reading_the_umask_never_changes_it():
    """Setting the umask to read it (os.umask's only way) leaves a moment where another thread's files get umask 0;
    the umask is read from /proc where there is one."""
    from poslab.io import _umask

    old = os.umask(0o027)
    try:
        assert _umask() == 0o027 and os.umask(0o027) == 0o027  # read, and still what it was
    finally:
        os.umask(old)
