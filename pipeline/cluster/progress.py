"""Per-frame progress of a --ray run's clip segments: each actor's segment encoder counts its frames into a small
Ray actor (the board, no CPU of its own) a few times a second; the driver reads the board twice a second and moves
its bar by the frames of finished segments plus those in flight, so a long segment's frames show as they are
made, not when it ends. A segment redone after its actor died counts from zero again (its count is replaced)."""
from __future__ import annotations

import threading
import time

PUSH_S = 0.25  # an actor's segment pushes its count at most this often
POLL_S = 0.5   # the driver reads the board this often


class Board:
    """The Ray actor: each running segment's frames so far, by key."""

    def __init__(self):
        self.frames: dict[str, int] = {}

    def set(self, key: str, n: int) -> None:
        self.frames[key] = n

    def snapshot(self) -> dict[str, int]:
        return dict(self.frames)


def segment_key(rel: str, index: int) -> str:
    return f"{rel}#{index}"


class RemoteBar:
    """What a segment's encoder updates per frame in an actor (tqdm's `update`), pushed to the board now and then."""

    def __init__(self, board, key: str):
        self.board, self.key, self.n, self.last = board, key, 0, 0.0

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= PUSH_S:
            self.last = now
            self.board.set.remote(self.key, self.n)  # fire and forget: the frames never wait on the driver

    def close(self) -> None:
        pass


class DriverBar:
    """The driver's bar: images and finished segments as their records come (`done`: the frames of segments a
    killed run finished), plus the board's in-flight frames, redrawn by a thread until `stop`. It never moves back
    (a redone segment's lost frames stay counted)."""

    def __init__(self, ray, board, bar, done: int = 0):
        self.ray, self.board, self.bar = ray, board, bar
        self.lock = threading.Lock()
        self.done, self.running, self.finished_keys = done, {}, set()
        self._draw()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._poll, name="sr-ray-progress", daemon=True)
        if board is not None:  # no clip: the records alone move the bar
            self.thread.start()

    def update(self, n: int, key: str | None = None) -> None:
        """n pictures done: an image's 1, or a finished segment's frames (`key`)."""
        with self.lock:
            self.done += n
            if key is not None:
                self.finished_keys.add(key)
            self._draw()

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        with self.lock:
            self.bar.set_postfix_str(s, refresh=refresh)

    def _poll(self) -> None:
        while not self.stopping.wait(POLL_S):
            try:
                frames = self.ray.get(self.board.snapshot.remote(), timeout=POLL_S * 4)
            except Exception:  # a slow or lost board: the records still move the bar
                continue
            with self.lock:
                self.running = frames
                self._draw()

    def _draw(self) -> None:
        target = self.done + sum(n for k, n in self.running.items() if k not in self.finished_keys)
        if target > self.bar.n:
            self.bar.update(target - self.bar.n)

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(timeout=POLL_S * 8)
