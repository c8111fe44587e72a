"""The per-image unit of work of the sr stage: decode -> plan -> infer (tiled or batched) -> encode and
write atomically -> record.

`ImageWorker` holds what every image of a run shares (a loaded backend, scale, tile plan settings,
output options). The folder scheduler (pipeline.sr.runner.scheduler) calls its steps on its own threads to
overlap them; `ImageWorker.process(job)` runs the same steps in a row for one image, for callers that
schedule images themselves (e.g. one worker per Ray actor). The steps (plan, infer_tiled / submit_batch)
fill only their Planned; callers keep their own records (Record.take), so the Triton service and the video
runner use them without one. In process(), per-image problems become the Record's status and one-line reason;
they are never raised.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models import tile_data
from models.spec import ModelSpec
from pipeline.backends.base import Backend
from pipeline.backends.pixels import NonFiniteOutput
from pipeline.errors import PipelineError, first_line
from pipeline.images import header, imageio, metadata, tiling
from pipeline.images.bicubic import bicubic
from pipeline.images.imageio import Image, ImageError
from pipeline.sr.runner.finite import OutputCheck
from pipeline.sr.runner.jobs import Job
from pipeline.sr.runner.records import Record
from pipeline.sr.runner.reference import reference_metrics

try:
    import psutil
except ImportError:  # optional: without it the free-memory check is skipped
    psutil = None


@dataclass
class Decoded:
    """A decode attempt: the image, or the one-line reason it could not be read."""

    image: Image | None
    reason: str
    seconds: float


@dataclass
class Planned:
    """An image ready for inference: its pixels, tile plan, output buffer and what the plan noted. The steps fill
    only this; `rec` is the caller's own bookkeeping (the folder scheduler's Record, see Record.take)."""

    image: Image
    plan: tiling.TilePlan
    out: np.ndarray
    notes: list[str]
    rec: Record | None = None
    infer_s: float = 0.0
    rerun: int = 0  # tiles (a whole image: 1) whose output was not finite, re-run at fp32 (pipeline.sr.runner.finite)
    rerun_reason: str = ""
    failure: str = ""     # a whole image of a batch whose output could not be made finite: why (nothing is written)
    rgb: np.ndarray | None = None  # the backend's samples, still to be put into `out` (assemble)
    alpha_due: bool = False        # its alpha plane is still to be added to `out` (assemble)

    def assemble(self) -> None:
        """Put collected samples that are not the output already into it, and the alpha plane (where the caller
        chooses to: the folder's encoder threads, off the thread that drives inference)."""
        if self.rgb is not None:
            imageio.store_pixels(self.out, 0, 0, self.rgb)
            self.rgb = None
        if self.alpha_due:
            self.alpha_due = False
            a = bicubic(self.image.region_alpha(0, self.image.height, 0, self.image.width), self.out.shape[:2])
            imageio.store_alpha(self.out, 0, 0, a, self.image.depth)

    @property
    def in_size(self) -> tuple[int, int]:
        return self.image.width, self.image.height

    @property
    def out_size(self) -> tuple[int, int]:
        return self.out.shape[1], self.out.shape[0]


def _checked(run: Callable[..., tuple], arg) -> tuple:
    """run(arg) -> (output, samples re-run at fp32): that and None, or (output, those re-run, the NonFiniteOutput
    of the others)."""
    try:
        return (*run(arg), None)
    except NonFiniteOutput as e:
        return e.samples, e.repaired, e


def _pixels_batch(items: list[Planned]) -> np.ndarray:
    """Whole images' integer samples as one NHWC batch: one image's own pixels where they are a plain array (no
    copy), else stacked."""
    if len(items) == 1:
        return items[0].image.region_pixels(0, items[0].image.height, 0, items[0].image.width)[None]
    return np.stack([it.image.region_pixels(0, it.image.height, 0, it.image.width) for it in items])


def _affected(result: tuple, i: int) -> bool:
    return result[2] is not None and i in result[2].affected


def decode(job: Job) -> Decoded:
    t0 = time.perf_counter()
    try:
        image, reason = imageio.read_image(job.src), ""
    except ImageError as e:
        image, reason = None, str(e)
    except Exception as e:  # a decoder crash on one file must not stop the batch
        image, reason = None, f"{type(e).__name__}: {first_line(e)}"
    return Decoded(image, reason, time.perf_counter() - t0)


def infer_reason(e: BaseException) -> str:
    """One line for an inference failure of one image (or video frame): our own errors say theirs, e.g. a frame
    whose output the free memory cannot hold."""
    if isinstance(e, (PipelineError, ImageError)):
        return str(e)
    if isinstance(e, MemoryError):
        return "out of memory during inference (try a smaller --tile)"
    return f"inference failed: {type(e).__name__}: {first_line(e)}"


def write_reason(rec: Record, e: BaseException) -> str:
    """One line for an encode/write failure of one image."""
    if isinstance(e, ImageError):
        return str(e)
    if isinstance(e, OSError):
        return f"cannot write {rec.job.dst}: {e.strerror or e}"
    return f"{type(e).__name__}: {first_line(e)}"


def write_output(rec: Record, pixels, jpeg_quality: int) -> bool:
    """Encode and write one output atomically (the encoder every executor uses); its notes, encode time and status
    go to `rec`. False (and rec failed) when it could not be written."""
    t0 = time.perf_counter()
    try:
        rec.notes.extend(imageio.write_image(rec.job.dst, pixels, rec.job.fmt, jpeg_quality))
    except Exception as e:  # this file's encoder or file system error
        rec.fail(write_reason(rec, e))
        return False
    rec.encode_s = time.perf_counter() - t0
    rec.status = "ok"
    return True


FREE_MEMORY_S = 0.25  # how long a reading of the free memory stands (each read costs the planning thread ~0.3 ms)
_free_read: list[float] = [-FREE_MEMORY_S, 0.0]  # (when, bytes) of the last reading


def _free_memory() -> int | None:
    """The free memory in bytes, read at most every FREE_MEMORY_S (None without psutil)."""
    if psutil is None:
        return None
    now = time.perf_counter()
    if now - _free_read[0] >= FREE_MEMORY_S:
        _free_read[:] = [now, float(psutil.virtual_memory().available)]
    return int(_free_read[1])


def output_problem(h: int, w: int, channels: int, depth: int, fmt: str) -> str:
    """Why an output of h x w cannot be produced, or ''."""
    side = imageio.MAX_SIDE.get(fmt, 2**31 - 1)
    if max(h, w) > side:
        return f"output {w}x{h} exceeds the {fmt} limit of {side} pixels per side"
    need = h * w * channels * (2 if depth == 16 else 1) * 2  # buffer + encoded copy
    free = _free_memory()
    if free is not None and need > free // 2:
        return (f"output {w}x{h} needs {need / 2**30:.1f} GiB, more than half the free memory "
                f"({free / 2**30:.1f} GiB)")
    return ""


SIZE_PROBES, SIZE_PROBE_BYTES = 3, 1 << 20  # the first images the plan line counts tiles for; header bytes read


def first_sizes(paths: list[Path], most: int = SIZE_PROBES) -> list[tuple[int, int]]:
    """(height, width) of the first `most` images from their headers; an unreadable one, or one over the pixel
    limit (a hostile header's size is never planned), is left out: its own line comes when it is read."""
    sizes = []
    for path in paths[:most]:
        try:  # sr's own reader: regular files only, opened without blocking (a FIFO named x.png never hangs here)
            _, w, h = header.image_size(imageio.read_bytes(path, SIZE_PROBE_BYTES))
        except (ImageError, header.HeaderError, ValueError, IndexError):
            continue
        if w >= 1 and h >= 1 and header.over_limit(w, h, "image") is None:
            sizes.append((h, w))
    return sizes


def tile_margin(spec: ModelSpec, scale: float, tile_overlap: int | None) -> int:
    """HR pixels of context each tile reads past its kept region."""
    if tile_overlap is None:  # the exact margin, or the measured overlap where that is smaller (RRDBNet)
        return tiling.model_margin(spec.receptive_radius, scale, measured_overlap(spec), spec.default_scale)
    return math.ceil(tile_overlap * scale)


def measured_overlap(spec: ModelSpec) -> int | None:
    """The stored overlap (input px) of a registered model (models.tile_data); None: the exact margin."""
    return tile_data.overlap_lr(spec.name) if spec.external is None and spec.registered else None


def peak_per_input_pixel(backend: Backend) -> float | None:
    """The model's measured peak bytes per input pixel on this backend and precision (models.tile_data); None
    when not measured (our SRCNNs carry theirs per output pixel in the spec; a user's model is unknown)."""
    spec = backend.spec
    if spec.external is not None or not spec.registered:
        return None
    return tile_data.bytes_per_input_pixel(spec.name, backend.name, backend.precision)


FOLDER_STREAMS = 2  # CPU streams a folder of whole images asks of its backend (Backend.run_streams): two at once


def in_flight(streams: int) -> int:
    """Whole-image batches submitted and not collected: the next before the one before it is collected, so a
    device works while the host reads and writes; on a backend's CPU streams one more than the streams, so each
    stream finds a batch queued while the host converts and writes the last."""
    return streams + 1 if streams > 1 else 2


AUTO_BATCH = 8  # --batch auto on a device: at most this many images or tiles per call
AUTO_BATCH_SIDE = 2048  # ... and only as many as leave each one a crop of this many HR pixels square
DEVICE_SHARE = 0.5  # of the device's free memory that tiles in flight may take (it holds nothing else of ours)


def batch_limit(backend: Backend, batch: int | str) -> int:
    """--batch (or 'auto': on a device, the most that fit, capped; on the host 1, as a host backend already
    spreads one image over every core), capped by the largest batch an engine's profiles take (TensorRT)."""
    if batch == "auto":
        mem = backend.device_memory()
        if mem is None:
            batch = 1
        else:
            fit = int(mem.free_bytes * DEVICE_SHARE // (mem.bytes_per_output_pixel * AUTO_BATCH_SIDE ** 2))
            batch = max(1, min(AUTO_BATCH, fit))
    if backend.profiles:
        return min(batch, max(int(p.batch[2]) for p in backend.profiles))
    return batch


def tile_size(backend: Backend, scale: float, margin: int, batch: int, tile: int | None) -> int | None:
    """LR tile side (None = whole images): --tile, or from free memory (a device backend's own, at the model's
    measured cost per output pixel: whole images whenever they fit), capped so crops fit an engine."""
    if tile is None:
        mem, per_input = backend.device_memory(), peak_per_input_pixel(backend)
        if mem is None and per_input is not None:  # the measured memory model: the largest tile that fits
            size = tiling.measured_tile(scale, margin, per_input, tiling.host_budget(), batch)
        elif mem is None:
            size = tiling.host_tile(scale, margin, batch, backend.spec.host_bytes_per_output_pixel)
        else:
            size = tiling.auto_tile(scale, margin, batch, mem.free_bytes, cap_bytes=None,
                                    bytes_per_pixel=mem.bytes_per_output_pixel, share=DEVICE_SHARE)
    else:
        size = tile or None
    max_in = backend.input_limit(scale)
    if max_in is None:
        return size
    limit = tiling.max_tile_for_input_limit(min(max_in), scale, margin)
    if limit < 1:
        raise PipelineError(f"the backend's largest input {max_in} is too small for tiles with "
                            f"{margin} px of context at x{scale:g}; rebuild it with a larger profile")
    return limit if size is None or size > limit else size


class ImageWorker:
    """Everything one run's images share, and the steps that turn one input file into one output file."""

    def __init__(self, backend: Backend, model: str | ModelSpec, scale: float, *, tile: int | None = None,
                 tile_overlap: int | None = None, batch: int | str = 1, jpeg_quality: int = 95,
                 reference: str | Path | None = None, streams: int = 1, keep_metadata: bool = True):
        self.backend = backend
        self.scale = scale
        # A name is the loaded backend's model (sr.settings.resolve_model checked that): its spec is the backend's.
        spec = model if isinstance(model, ModelSpec) else backend.spec
        self.margin = tile_margin(spec, scale, tile_overlap)
        self.overlap_source = "--tile-overlap" if tile_overlap is not None else (
            "exact: the receptive field" if self.margin == tiling.context_margin(spec.receptive_radius, scale)
            else tile_data.overlap_rule(spec.name))
        self.align = spec.tile_align
        self.batch = batch_limit(backend, batch)
        # `streams`: the backend's CPU streams (Backend.run_streams, set by the caller) running whole images, whose
        # batches in flight share the tiles' memory budget; a tiled image runs one call at a time (infer_tiled)
        self.streams = streams
        self.in_flight = in_flight(streams)
        self.tile = tile_size(backend, scale, self.margin, self.batch * (self.in_flight if streams > 1 else 1), tile)
        self.max_input = backend.input_limit(scale)  # crops never exceed it (an engine's profiles at this scale)
        self.jpeg_quality = jpeg_quality
        self.keep_metadata = keep_metadata  # the input's ICC profile, EXIF and XMP into its output
        self.reference = Path(reference) if reference else None
        self.check = OutputCheck(backend)  # every output checked for NaN / inf before it is written

    def peak_estimate(self) -> float | None:
        """Host working memory of the tiles in flight: the measured peak per input pixel (models.tile_data) or our
        SRCNNs' per output pixel (ModelSpec) times a full crop; None on a device or for a model not measured."""
        if self.tile is None or self.backend.device_memory() is not None:
            return None
        per_input, per_output = peak_per_input_pixel(self.backend), self.backend.spec.host_bytes_per_output_pixel
        if per_input is not None:
            return tiling.crop_input_pixels(self.tile, self.margin, self.scale) * per_input * self.batch
        side = round(self.tile * self.scale) + 2 * self.margin
        return None if per_output is None else side * side * per_output * self.batch

    def plan_line(self, sizes: list[tuple[int, int]]) -> str:
        """The tile plan the run's first lines give: tile side, overlap and why, the peak estimate against the
        budget, and the tiles of the first images (`sizes`: their (height, width))."""
        if self.tile is None:
            return f"tile plan: whole images ({self.margin} HR px of context if tiled: {self.overlap_source})"
        context = math.ceil(self.margin / self.scale)
        need = self.peak_estimate()
        peak = "sized from the device's free memory" if self.backend.device_memory() is not None else \
            "peak not measured for this model" if need is None else (
            f"peak ~{need / 2**20:,.0f} MiB (budget {tiling.host_budget() / 2**20:,.0f} MiB)")
        plans = [(h, w, tiling.plan(h, w, self.scale, self.tile, self.margin, align=self.align,
                                    max_input=self.max_input)) for h, w in sizes]
        counts = ", ".join(f"{w}x{h}: {p.count} tile{'s' * (p.count > 1)}" for h, w, p in plans)
        return (f"tile plan: {self.tile} input px tiles, {context} px overlap ({self.overlap_source}); {peak}"
                + (f"; {counts}" if counts else ""))

    # -- the steps ---------------------------------------------------------------------------------------

    def plan(self, image: Image, fmt: str) -> Planned:
        """Check an output in `fmt` is producible and plan its tiles; raises ImageError."""
        oh, ow = tiling.output_length(image.height, self.scale), tiling.output_length(image.width, self.scale)
        problem = output_problem(oh, ow, image.channels, image.depth, fmt)
        if problem:
            raise ImageError(problem)
        plan = tiling.plan(image.height, image.width, self.scale, self.tile, self.margin, align=self.align,
                           max_input=self.max_input)
        notes = list(image.notes)  # what the decoder warned of
        if not plan.exact:
            notes.append(f"tile grid off the whole-image sampling grid by up to {plan.max_shift:.3f} input px "
                         f"(scale {self.scale:g} does not align with this size); output is close, not equal")
        if self.keep_metadata:
            notes += metadata.dropped(image.meta, fmt)
        return Planned(image, plan, imageio.new_output(oh, ow, image.channels, image.depth), notes)

    def batchable(self, item: Planned) -> bool:
        """Whole images go through `submit_batch` (one or up to --batch of one size), so the scheduler can submit
        the next before it collects this one; tiled images are pipelined tile batch by tile batch instead."""
        return item.plan.whole

    def _reran(self, item: Planned, samples: list[int]) -> None:
        if samples:
            item.rerun += len(samples)
            item.rerun_reason = self.check.reason

    def _infer(self, batch: np.ndarray) -> tuple[np.ndarray, list[int]]:
        return self.check.floats(np.ascontiguousarray(batch, dtype=np.float32), self.scale)

    def _infer_floats(self, item: Planned) -> Callable[[np.ndarray], Callable[[], np.ndarray]]:
        """run_tiles' infer for the float path: run when collected (the host computes it in either case), so a
        non-finite output is raised where run_tiles names its tile."""
        def submit(batch: np.ndarray) -> Callable[[], np.ndarray]:
            def collect() -> np.ndarray:
                y, reran = self._infer(batch)
                self._reran(item, reran)
                return y
            return collect
        return submit

    def _submit_pixels(self, item: Planned) -> Callable[[np.ndarray], Callable[[], np.ndarray]]:
        """run_tiles' infer for integer pixels: NHWC samples submitted; collected later (checked, re-run at fp32
        where needed) as NHWC samples seen as NCHW views (what run_tiles checks and hands back)."""
        def submit(batch: np.ndarray) -> Callable[[], np.ndarray]:
            collect = self.check.submit(batch, self.scale)

            def result() -> np.ndarray:
                samples, reran = collect(None)
                self._reran(item, reran)
                return samples.transpose(0, 3, 1, 2)
            return result
        return submit

    def infer_tiled(self, item: Planned, progress: Callable[[int, int], None] | None = None) -> None:
        """One image, tile by tile (or whole: the one-tile plan), into its output buffer; `progress(done, total)`
        after each tile.

        Color images go to the backend as integer samples and come back as samples (`Backend.infer_pixels`:
        a device backend converts and rounds on the device); gray ones take the float path, whose luma is
        computed in float before the single rounding."""
        image, out, depth = item.image, item.out, item.image.depth
        done = 0

        def write(t: tiling.Tile, y: np.ndarray) -> None:
            nonlocal done
            sy, sx = t.keep_slices()
            if image.gray:
                imageio.store_rgb(out, t.y.keep0, t.x.keep0, y[:, sy, sx], depth)
            elif item.plan.whole and y.shape[0] == out.shape[2]:  # the backend's result is the output: no copy
                item.out = y.transpose(1, 2, 0)
            else:
                imageio.store_pixels(out, t.y.keep0, t.x.keep0, y.transpose(1, 2, 0)[sy, sx])
            if image.has_alpha:  # alpha: plain bicubic on the same crop, so it tiles exactly as well
                a = bicubic(image.region_alpha(t.y.crop0, t.y.crop1, t.x.crop0, t.x.crop1), t.out_shape)
                imageio.store_alpha(out, t.y.keep0, t.x.keep0, a[sy, sx], depth)
            done += 1
            if progress is not None:
                progress(done, item.plan.count)

        t0 = time.perf_counter()
        if self.streams > 1:  # its tiles one call at a time on every core: its last tile would run alone on one stream
            self.backend.run_streams(1)
        try:
            if image.gray:
                tiling.run_tiles(item.plan, image.region_rgb, self._infer_floats(item), write, self.batch)
            else:
                tiling.run_tiles(item.plan, image.region_pixels, self._submit_pixels(item), write, self.batch)
        finally:
            if self.streams > 1:
                self.backend.run_streams(self.streams)
        item.infer_s = time.perf_counter() - t0

    def infer_batch(self, items: list[Planned]) -> None:
        """Whole images of one size in one inference call; raises the first image's failure (a video's frames, a
        request's images: one fails, all do)."""
        self.submit_batch(items)()
        for it in items:
            it.assemble()
        failure = next((it.failure for it in items if it.failure), "")
        if failure:
            raise PipelineError(failure)

    def submit_batch(self, items: list[Planned]) -> Callable[[], None]:
        """Whole images of one size submitted in one call; the returned `finish()` collects the results and records
        the time. A caller may read and submit the next batch in between, while a device works on this one. An
        image's output is then the backend's samples themselves (no copy) where they are all of it, else they wait
        in `rgb` for `Planned.assemble` (alpha, a BGRA output): the caller's to call, on any thread."""
        t0 = time.perf_counter()
        # gray (luma before rounding) or a mix of 8- and 16-bit images (one sample type per call): the float path
        floats = any(it.image.gray for it in items) or len({it.image.depth for it in items}) > 1
        collect, done = None, None
        if floats:
            x = np.stack([it.image.region_rgb(0, it.image.height, 0, it.image.width) for it in items])
            done = _checked(self._infer, x)
            for i, (it, yi) in enumerate(zip(items, done[0], strict=True)):
                if not _affected(done, i):
                    imageio.store_rgb(it.out, 0, 0, yi, it.image.depth)
                    it.alpha_due = it.image.has_alpha
        else:
            x = _pixels_batch(items)
            collect = self.check.submit(x, self.scale)
        del x

        def finish() -> None:
            result = done if collect is None else _checked(collect, None)
            self._settle(items, result)
            if collect is not None:
                for it, samples in zip(items, result[0], strict=True):
                    if samples.shape == it.out.shape:  # three channels: the samples are the output
                        it.out = samples
                    else:
                        it.rgb, it.alpha_due = samples, it.image.has_alpha
            share = (time.perf_counter() - t0) / len(items)
            for it in items:
                it.infer_s = share

        return finish

    def _settle(self, items: list[Planned], result: tuple) -> None:
        """A whole-image batch's check: images re-run at fp32 counted, those that could not be made finite marked
        failed (`failure`: one line each; the others are written)."""
        _, reran, bad = result
        for i in reran:
            self._reran(items[i], [i])
        for i in (bad.affected if bad is not None else []):
            one = NonFiniteOutput(bad.counts[i:i + 1], source=bad.source, place="the whole image")
            one.note = bad.note
            items[i].failure = str(one)

    def encode(self, item: Planned, rec: Record) -> None:
        """Encode and write atomically to rec's output, then score against --reference; raises on failure."""
        t0 = time.perf_counter()
        item.assemble()
        meta = item.image.meta if self.keep_metadata else metadata.NONE
        rec.notes.extend(imageio.write_image(rec.job.dst, item.out, rec.job.fmt, self.jpeg_quality, meta))
        rec.encode_s = time.perf_counter() - t0
        if self.reference is not None:
            rec.metrics = reference_metrics(self.reference, rec.job.rel, item.out, item.image, self.scale)

    # -- one image, start to end ------------------------------------------------------------------------

    def process(self, job: Job) -> Record:
        """Decode, infer and write one image in this thread; failures are in the returned Record."""
        rec = Record(job)
        if job.problem:
            rec.fail(job.problem)
            return rec
        d = decode(job)
        rec.decode_s = d.seconds
        if d.image is None:
            rec.fail(d.reason)
            return rec
        try:
            item = self.plan(d.image, job.fmt)
        except ImageError as e:
            rec.fail(str(e))
            return rec
        rec.take(item)
        try:
            self.infer_tiled(item)
        except Exception as e:  # one image's inference failure is its record's, not the caller's
            rec.fail(infer_reason(e))
            return rec
        rec.inferred(item)
        try:
            self.encode(item, rec)
        except Exception as e:  # likewise for its encoder or file system errors
            rec.fail(write_reason(rec, e))
            return rec
        rec.status = "ok"
        return rec
