"""Names that files we read hand us (ONNX metadata, engine sidecars, `--name`) never steer reads or writes outside
the folder they belong to: a sibling file is a plain name in its owner's folder and a regular file; a name that
becomes part of a file name is reduced to safe characters plus a hash of the original."""
from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from pipeline.errors import PipelineError

NAME_MAX = 255  # bytes in one path component (Linux, macOS)
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def _real(path: Path) -> Path:
    """Where a path leads (os.path.realpath: a symlink loop is not a RuntimeError as with Path.resolve < 3.13)."""
    return Path(os.path.realpath(path))


def component_problem(name: str) -> str | None:
    """Why `name` is not one plain path component (no separator, not '.', '..', absolute or empty), or None."""
    if not isinstance(name, str) or not name:
        return "is empty"
    if "/" in name or "\\" in name or "\0" in name:
        return "contains a path separator"
    if name in (".", ".."):
        return f"is '{name}'"
    return None


def safe_component(name: str, what: str) -> str:
    """`name` itself when it is one plain, printable path component; else one PipelineError line."""
    problem = component_problem(name)
    if problem is None and not name.isprintable():
        problem = "contains control characters"
    if problem is None and len(name.encode("utf-8", "surrogatepass")) > NAME_MAX:
        problem = f"is longer than a file name may be ({NAME_MAX} bytes of UTF-8)"
        name = name[:40] + "..."
    if problem:
        raise PipelineError(f"{what} {name!r} {problem}: give a plain name (one path component)")
    return name


def file_token(name: str) -> str:
    """A file-name-safe token for a name from outside (a model name in metadata): the name itself when it is
    already safe, else its safe characters plus 8 hex of its SHA-256 (so two different names never share one)."""
    if _SAFE.fullmatch(name) and len(name) <= 64:
        return name
    cleaned = re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("._")[:40] or "model"
    return f"{cleaned}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def regular_file_problem(path: Path) -> str | None:
    """Why `path` is not an existing regular file (a FIFO, device, folder, dangling link, loop), or None."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "does not exist"
    except OSError as e:  # a symlink loop (ELOOP), permission denied, name too long
        return f"cannot be opened ({e.strerror or e})"
    if stat.S_ISDIR(mode):
        return "is a folder"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a FIFO, socket or device)"
    return None


def sibling(owner: Path, name: str, what: str, *, missing_ok: bool = False) -> Path:
    """The file `name` (from `owner`'s metadata or sidecar) in `owner`'s own folder; one PipelineError line when
    the name is not a plain name or the file is not a regular file inside that folder (`missing_ok`: a file that
    does not exist is returned, for callers that report it their own way)."""
    owner = Path(owner)
    problem = component_problem(name)
    if problem:
        raise PipelineError(f"{owner}: the {what} it names ({name!r}) {problem}; only a plain file name in "
                            f"{owner.name}'s own folder is followed")
    path = owner.parent / name
    problem = regular_file_problem(path)
    if problem == "does not exist" and missing_ok and not path.is_symlink():
        return path
    if not problem and _real(path).parent != _real(owner.parent):  # a link beside the file leading elsewhere
        problem = f"is a link leading outside {owner.name}'s folder"
    if problem:
        raise PipelineError(f"{owner}: the {what} {name} {problem}")
    return path


def inside_problem(path: Path, folder: Path) -> str | None:
    """Why `path` (relative, e.g. an ONNX external-data location) does not stay in `folder`, or None."""
    p = Path(path)
    if p.is_absolute():
        return "is an absolute path"
    if ".." in p.parts:
        return "climbs out of the folder ('..')"
    real, root = _real(Path(folder) / p), _real(Path(folder))
    if real != root and root not in real.parents:
        return "leads outside the folder through a link"
    return None


def open_inside(folder: Path, rel: str | Path) -> int:
    """A read-only descriptor of the regular file `rel` inside `folder`, opened component by component without
    following any link (O_NOFOLLOW, each folder opened relative to the last): what was checked by name earlier
    cannot be swapped for a link elsewhere before it is read. One PipelineError line otherwise."""
    parts = Path(rel).parts
    problem = inside_problem(Path(rel), folder) if parts else "is empty"
    if problem:
        raise PipelineError(f"{Path(folder) / rel} {problem}")
    nofollow = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    here = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        for part in parts[:-1]:
            there = os.open(part, nofollow | os.O_DIRECTORY, dir_fd=here)
            os.close(here)
            here = there
        fd = os.open(parts[-1], nofollow | os.O_NONBLOCK, dir_fd=here)
    except OSError as e:  # ELOOP / ENOTDIR: a link (or a file) where the name was checked
        raise PipelineError(f"{Path(folder) / rel} cannot be opened inside {folder} without following a link "
                            f"({e.strerror or e}); only regular files there are copied") from None
    finally:
        os.close(here)
    return _regular_fd(fd, Path(folder) / rel)


def open_regular(path: Path) -> int:
    """A read-only descriptor of `path` (a name the user gave: links followed), checked to be a regular file on
    the open descriptor itself, so what is read is what was checked. One PipelineError line otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise PipelineError(f"{path} cannot be opened ({e.strerror or e})") from None
    return _regular_fd(fd, Path(path))


def _regular_fd(fd: int, path: Path) -> int:
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise PipelineError(f"{path} is not a regular file (a FIFO, socket, device or folder)")
    os.set_blocking(fd, True)
    return fd
