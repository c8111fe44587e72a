"""Reading the files a page embeds: only regular files inside the report's own folder, opened without following a
link (O_NOFOLLOW on the file; the resolved path must lie inside the folder, so no linked folder on the way leads
out), and no bigger than the page's budget. Anything else is refused with a reason the page lists."""
from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
        ".webp": "image/webp"}


class NotEmbedded(Exception):
    """Why a file was left out of the page (one short phrase)."""


def _inside(folder: Path, path: Path) -> Path:
    root, real = os.path.realpath(folder), os.path.realpath(path)
    if os.path.commonpath([root, real]) != root or real == root:
        raise NotEmbedded("outside the report's folder")
    return path


def read_confined(folder: Path, path: Path, limit: int) -> bytes:
    """The bytes of `path` (as the writer holds it: absolute, or relative to the working directory) when it lies
    inside `folder`: a regular file, not a link, at most `limit` bytes; NotEmbedded otherwise."""
    full = _inside(Path(folder), Path(path))
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise NotEmbedded("missing") from None
    except OSError as e:  # ELOOP: the file is a link
        raise NotEmbedded("a link" if os.path.islink(full) else f"unreadable ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise NotEmbedded("not a regular file")
        if st.st_size > limit:
            raise NotEmbedded(f"{st.st_size >> 10} KiB")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NotEmbedded(f"{len(data) >> 10} KiB")
    return data


def data_uri(folder: Path, path: Path, limit: int) -> str:
    """A picture file as a data: URI (read_confined); its type from its suffix, an unknown one refused."""
    data = read_confined(folder, path, limit)
    mime = MIME.get(Path(path).suffix.lower())
    if mime is None:
        raise NotEmbedded("not a picture type the page embeds")
    return f"data:{mime};base64," + base64.b64encode(data).decode()
