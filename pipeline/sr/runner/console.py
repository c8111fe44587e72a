"""What the sr stage prints: the first line and failures always, progress and per-image lines unless quiet,
the backend's full description and reasons with --verbose. On a terminal progress is a tqdm bar; when stderr is
redirected (a log file, CI) it is a plain line every PLAIN_EVERY_S seconds instead of `\\r` redraws."""
from __future__ import annotations

import sys
import textwrap
import threading
import time
from collections.abc import Callable

from tqdm import tqdm

from pipeline.errors import printable
from pipeline.images.imageio import written_layout

PLAIN_EVERY_S = 10.0  # seconds between plain progress lines (redirected stderr)
TILE_EVERY_S = 5.0    # a tiled image taking longer than this reports its tiles this often
WIDTH = 110           # a reason's lines wrap here (always_lines; a path longer than that stays whole)


def scale_note(meta: dict[str, str], scale: float) -> str:
    """What a user's net does at `scale`, from the metadata that describes it (its spec's or its ONNX file's):
    'Compact runs at x4, then resizes to x3'; '' for our own models."""
    arch, native = meta.get("architecture"), meta.get("native_scale")
    if not arch or not native:
        return ""
    native_f = float(native)
    if float(scale) == native_f:
        return f"{arch} runs at its own x{native_f:g}"
    return f"{arch} runs at x{native_f:g}, then resizes to x{float(scale):g}"


def headline(model: str, scale: float, note: str, backend: str, why: str, what: str, output, overwrites: int) -> str:
    """The run's first line: model, scale, backend and why in a few words, what (e.g. '3 images') goes where."""
    how = f" ({note})" if note else ""
    over = (f"; overwrites {overwrites} existing output{'s' if overwrites != 1 else ''} (--skip-existing keeps "
            "them)") if overwrites else ""
    return f"sr: {model} x{scale:g}{how} on {backend} ({why}); {what} -> {output}{over}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def count_text(images: int, videos: int = 0) -> str:
    """'3 images', '1 video', '2 images, 1 video': how every sr line counts inputs."""
    return ", ".join(plural(n, kind) for n, kind in ((images, "image"), (videos, "video")) if n) or "0 images"


def done_line(counts: dict[str, int], wall_s: float, *, images: int, frames: int, out_mpix: float,
              process_s: float, setup_s: float | None = None, stages: dict[str, float] | None = None) -> str:
    """The closing line of every sr run (local, --ray, --triton): counts, then rates over the whole run and over
    processing alone; a video's frames count as pictures (images/s, frames/s, or both). `stages`: the clips'
    busy seconds per stage (decode, inference, encode; waits on the queues between them left out), said as
    shares of their sum after the rates: where a clip's time went."""
    head = f"done: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped in {wall_s:.1f} s"
    pictures = images + frames
    if not pictures or wall_s <= 0:
        return head + " (nothing upscaled)"
    unit = "images" if not frames else "frames" if not images else "images+frames"
    then = f"{pictures / process_s:.3g} {unit}/s" if process_s > 0 else "-"
    setup = f"setup {setup_s:.1f} s, then " if setup_s is not None else "then "
    busy = sum(stages.values()) if frames and stages else 0.0
    split = "; " + ", ".join(f"{k} {100 * s / busy:.0f} %" for k, s in stages.items()) if busy > 0 else ""
    return (f"{head}: {pictures / wall_s:.3g} {unit}/s, {out_mpix / wall_s:.3g} MPix/s output over the whole run "
            f"({setup}{then}){split}")


def image_line(rec, scale: float) -> str:
    """The line of an image written (every executor's): sizes, scale, layout (and what the format could not
    hold), tiles."""
    mode, depth, lost = written_layout(rec.mode, rec.bit_depth, rec.job.fmt)
    layout = f"{rec.mode} {rec.bit_depth}-bit" + (f" -> {mode} {depth}-bit {rec.job.fmt}: " + "; ".join(lost)
                                                  if lost else "")
    rerun = f"; {plural(rec.rerun, 'tile')} re-run at fp32: {rec.rerun_reason}" if rec.rerun else ""
    return (f"{rec.job.rel}: {rec.in_size[0]}x{rec.in_size[1]} -> {rec.out_size[0]}x{rec.out_size[1]} "
            f"(x{scale:g}, {layout}, {rec.tiles} tile{'s' if rec.tiles != 1 else ''}{rerun})")


def rerun_line(rerun: dict) -> str:
    """'3 tiles of 2 inputs re-run at fp32: non-finite fp16 output' (RecordLog.rerun), after the done line."""
    return (f"{plural(rerun['tiles'], 'tile')} of {plural(rerun['inputs'], 'input')} re-run at fp32: "
            + "; ".join(rerun["reasons"]))


def failed_line(names: list[str], images: int, videos: int = 0) -> str:
    """After the done line: how many inputs failed, of which kind, and the first five."""
    more = " ..." if images + videos > 5 else ""
    return f"{count_text(images, videos)} failed: " + ", ".join(names[:5]) + more


class PlainProgress:
    """tqdm's calls the scheduler makes (update, set_postfix_str, close), as a plain line now and then."""

    def __init__(self, total: int | None, write: Callable[[str], None], every_s: float | None = None,
                 unit: str = "img", desc: str | None = None):
        self.total, self.n, self.postfix, self.unit, self.desc = total, 0, "", unit, desc
        self._write, self._every = write, PLAIN_EVERY_S if every_s is None else every_s
        self._t0 = self._last = time.perf_counter()

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        self.postfix = s

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.perf_counter()
        if now - self._last >= self._every and (self.total is None or self.n < self.total):
            self._last = now
            self._line(now)

    def _line(self, now: float) -> None:
        what = f"{self.desc}: " if self.desc else ""
        count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        unit = {"img": "image(s)"}.get(self.unit, f"{self.unit}(s)")
        elapsed = now - self._t0
        own = f"{self.n / elapsed:.2f} {self.unit}/s" if elapsed > 0 and self.n else ""
        rate = f", {self.postfix or own}" if self.postfix or own else ""
        self._write(f"progress: {what}{count} {unit} in {elapsed:.0f} s{rate}")

    def close(self) -> None:
        pass


class TileProgress:
    """Per-tile callback for one image: after TILE_EVERY_S, a line every TILE_EVERY_S saying how far it is."""

    def __init__(self, name: str, write: Callable[[str], None], every_s: float | None = None):
        self.name, self._write, self._every = name, write, TILE_EVERY_S if every_s is None else every_s
        self._t0 = self._last = time.perf_counter()

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if now - self._last >= self._every and done < total:
            self._last = now
            self._write(f"{self.name}: {done}/{total} tiles in {now - self._t0:.0f} s")


class Console:
    def __init__(self, progress: bool = True, log: Callable[[str], object] | None = None, verbose: bool = False):
        self.progress = progress
        self.verbose = verbose
        self._log = log
        self._lock = threading.Lock()  # scheduler threads report too

    def _write(self, msg: str) -> None:
        msg = printable(msg)  # names from users' files: a CR or an escape sequence is shown, not obeyed
        with self._lock:
            if self._log is not None:
                self._log(msg)
            else:
                tqdm.write(msg, file=sys.stderr)

    def always(self, msg: str) -> None:
        """The first line (model, scale, backend and why), failures, and anything the user must see."""
        self._write(msg)

    def always_lines(self, text: str, verbose_only: bool = False) -> None:
        """Our own text of several lines (a reason, one fact a line: pipeline.backends.select), each wrapped at
        WIDTH under its own indent and shown as one line is (a newline inside one line is escaped: it could come
        from a user's file name)."""
        if self.verbose or not verbose_only:
            for line in text.splitlines():
                indent = " " * (len(line) - len(line.lstrip(" ")))
                for part in textwrap.wrap(line, WIDTH, subsequent_indent=indent + "  ", break_long_words=False,
                                          break_on_hyphens=False) or [""]:
                    self._write(part)

    def info(self, msg: str) -> None:
        """Progress detail: per-image lines and totals; hidden when quiet."""
        if self.progress:
            self._write(msg)

    def written(self, rec, scale: float) -> None:
        """An image written (progress detail)."""
        self.info(image_line(rec, scale))

    def failed(self, rec) -> None:
        """An input that failed: always said."""
        self.always(f"failed {rec.job.rel}: {rec.reason}")

    def detail(self, msg: str) -> None:
        """What the first line leaves out (the backend's full description, the whole reason): --verbose only."""
        if self.verbose:
            self._write(msg)

    def tiles(self, name: str) -> TileProgress | None:
        """A per-tile progress callback for one image (None when quiet)."""
        return TileProgress(name, self._write) if self.progress else None

    def bar(self, total: int | None, unit: str = "img", desc: str | None = None, *,
            write: Callable[[str], object] | None = None, leave: bool = True):
        """A progress bar (count, rate, ETA when total is known; a video's frames may not be); when stderr is not a
        terminal, a plain line now and then instead, said through `write` when given. `leave=False`: the terminal's
        bar goes when it is done."""
        if not self.progress or self._log is not None:
            return tqdm(total=total, disable=True)
        if not sys.stderr.isatty():  # a log file gets lines, not carriage-return redraws
            return PlainProgress(total, write or self._write, unit=unit, desc=desc)
        return tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, dynamic_ncols=True, leave=leave)
