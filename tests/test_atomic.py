import pytest

from pipeline.artifacts import atomic
from pipeline.artifacts.atomic import atomic_path, atomic_write


def test_write_replaces_whole_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "sub" / "out.png"
    atomic_write(target, b"first")
    atomic_write(target, "second")
    assert target.read_bytes() == b"second"
    assert [p.name for p in target.parent.iterdir()] == ["out.png"]


def test_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "f.bin"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):
        atomic_write(target, object())  # fails mid-write
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_failed_rename_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "out.png"
    atomic_write(target, b"first")

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, b"second")
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["out.png"]


def test_atomic_path_for_writers_that_need_a_name(tmp_path):
    target = tmp_path / "model.onnx"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("writer crashed")
    assert not target.exists() and list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"whole")
    assert target.read_bytes() == b"whole"
    assert (target.stat().st_mode & 0o777) != 0o600  # umask-derived, not mkstemp's private mode
