"""Atomic file writes: write next to the target, then rename, so readers and crashes never see half a file."""
from __future__ import annotations

import errno
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_PART = ".{name}.{pid}-{tid}.part"  # atomic_path's temp name: the writer's process and thread
_PART_RE = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)-\d+\.part")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_parts(paths: list[Path]) -> int:
    """Remove the temp files atomic_path left beside these outputs when its process was killed (SIGKILL, power
    loss: no `finally` ran); a temp file of a process still running is left alone. Returns how many went."""
    wanted: dict[Path, set[str]] = {}
    for p in paths:
        wanted.setdefault(Path(p).parent, set()).add(Path(p).name)
    removed = 0
    for folder, names in wanted.items():
        try:
            entries = [e for e in os.scandir(folder) if e.name.endswith(".part") and e.is_file(follow_symlinks=False)]
        except OSError:  # not made yet
            continue
        for e in entries:
            m = _PART_RE.fullmatch(e.name)
            if m and m["name"] in names and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])):
                Path(e.path).unlink(missing_ok=True)
                removed += 1
    return removed


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path in `path`'s folder for a writer that needs a file name (torch.save, savefig, onnx.save);
    it replaces `path` when the block succeeds and is removed when it fails. The name is unique per process and
    thread, and the file gets the usual umask-derived mode (mkstemp's would be 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / _PART.format(name=path.name, pid=os.getpid(), tid=threading.get_ident())
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: str | Path, data: bytes | str) -> None:
    """Write bytes (or UTF-8 text) to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode() if isinstance(data, str) else data)


def folder_problem(folder: str | Path) -> str | None:
    """Why `folder` cannot be created or written, or None. Probed with a temp file (removed at once) in the folder or
    its nearest existing parent: permission bits say nothing to root, a read-only mount or /proc."""
    folder = Path(folder).absolute()
    base = folder
    while not base.exists() and base != base.parent:
        base = base.parent
    if not base.is_dir():
        return "is a file" if base == folder else f"is inside {base}, which is a file"
    try:
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as e:
        return f"cannot be written ({base} is not writable: {_REFUSALS.get(e.errno, e.strerror or str(e))})"
    return None


# How a folder refuses a new file, in words: /proc answers ENOENT for a folder that exists.
_REFUSALS = {errno.EROFS: "a read-only file system", errno.EACCES: "permission denied",
             errno.EPERM: "permission denied", errno.ENOENT: "a virtual file system that takes no new files"}
