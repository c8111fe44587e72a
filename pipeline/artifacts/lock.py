"""One writer per output: an advisory lock file beside it (`.NAME.lock`), held with flock for as long as a run
works on that output. The kernel drops the lock when its process dies (SIGKILL, power loss), so a killed run never
leaves a lock that blocks the next one; a second run on the same output is refused at once, with the holder's pid.
The file is removed by its holder on release; a run that opened it meanwhile sees another inode and tries again."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

_LOCK = ".{name}.lock"


class Busy(Exception):
    """Another process holds the output's lock; the message names it (one line)."""


def lock_path(output: Path) -> Path:
    return output.parent / _LOCK.format(name=output.name)


class OutputLock:
    """Held from `acquire` (Busy when another process holds it) to `release` (idempotent)."""

    def __init__(self, output: str | Path):
        self.path = lock_path(Path(output))
        self.fd: int | None = None

    def acquire(self) -> OutputLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise Busy(f"another run (pid {holder}) is writing this output; it is left to that run (rerun "
                           f"with --skip-existing once it ends)") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path, follow_symlinks=False).st_ino
            except FileNotFoundError:  # its holder released and removed it after our open: take a fresh one
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
                self.fd = fd
                return self
            os.close(fd)

    def release(self) -> None:
        if self.fd is None:
            return
        self.path.unlink(missing_ok=True)  # still locked: a run waiting on this inode sees it gone and retries
        os.close(self.fd)
        self.fd = None
