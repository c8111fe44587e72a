"""`python -m pipeline sr INPUT OUTPUT`: super-resolve an image or a folder tree of images.

Flow: discover jobs (pipeline.sr.jobs) -> check model/scale/backend and load the backend (before any
image is touched) -> decode on a small thread pool (pipeline.sr.imageio) -> tiled or batched inference on
the calling thread (pipeline.sr.tiling) -> quantise, encode and write atomically on the pool -> optional
PSNR/SSIM against --reference -> JSON summary. One bad file never stops the batch: it is reported in
one line and in the summary, and the exit code is 1.
"""
from __future__ import annotations

import json
import math
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.artifacts.atomic import atomic_write
from pipeline.errors import PipelineError
from pipeline.sr import imageio, tiling
from pipeline.sr.imageio import Image, ImageError
from pipeline.sr.jobs import Job, discover

BACKENDS = ("auto", "torch", "ort", "ort-sr-kernels", "trt")
PRECISIONS = ("fp32", "fp16")
# Images being decoded or written at once beyond the pool size; bounds memory along with WRITE_BYTES.
PREFETCH = 2
WRITE_BYTES = 512 << 20


# -- setup: everything that can fail before any image is read -------------------------------------------

def check_model_and_scale(model: str, scale: float | None):
    from models.spec import get_spec

    try:
        spec = get_spec(model)
    except KeyError as e:
        raise PipelineError(str(e.args[0])) from None
    scale = spec.default_scale if scale is None else scale
    try:
        return spec, spec.check_scale(scale)
    except ValueError as e:
        raise PipelineError(str(e)) from None


def create_backend(name: str, model: str, precision: str, onnx=None, engine=None, weights=None, threads=None):
    """Load the backend through pipeline.backends ('auto' picks one); returns (backend, why it was chosen)."""
    from pipeline import backends

    if name != "auto" and name not in backends.NAMES:
        raise PipelineError(f"unknown backend '{name}' (choose from: auto, {', '.join(backends.NAMES)})")
    if precision not in PRECISIONS:
        raise PipelineError(f"unknown precision '{precision}' (choose from: {', '.join(PRECISIONS)})")
    if onnx is not None and not Path(onnx).is_file():
        raise PipelineError(f"ONNX file not found: {onnx}")
    if engine is not None and not Path(engine).is_file():
        raise PipelineError(f"TensorRT engine not found: {engine}")
    opts = {k: v for k, v in (("onnx", onnx), ("engine", engine), ("weights", weights), ("threads", threads))
            if v is not None}
    backend = backends.create(name, model, precision, **opts)
    return backend, getattr(backend, "selection_reason", "")


def output_problem(h: int, w: int, channels: int, depth: int, fmt: str, backend) -> str:
    """Why an output of h x w cannot be produced, or ''."""
    side = imageio.MAX_SIDE.get(fmt, 2**31 - 1)
    if max(h, w) > side:
        return f"output {w}x{h} exceeds the {fmt} limit of {side} pixels per side"
    limit = getattr(backend, "max_output_pixels", None)
    if limit and h * w > limit:
        return f"output {w}x{h} exceeds the backend's limit of {limit} pixels"
    need = h * w * channels * (2 if depth == 16 else 1) * 2  # buffer + encoded copy
    try:
        import psutil

        free = psutil.virtual_memory().available
    except Exception:
        free = None
    if free is not None and need > free // 2:
        return (f"output {w}x{h} needs {need / 2**30:.1f} GiB, more than half the free memory "
                f"({free / 2**30:.1f} GiB)")
    return ""


# -- per-image record -----------------------------------------------------------------------------------

@dataclass
class Record:
    job: Job
    status: str = "pending"        # ok | failed | skipped
    reason: str = ""
    in_size: tuple[int, int] | None = None    # (width, height)
    out_size: tuple[int, int] | None = None
    mode: str = ""
    bit_depth: int = 0
    tiles: int = 0
    max_shift: float = 0.0
    decode_s: float = 0.0
    infer_s: float = 0.0
    encode_s: float = 0.0
    metrics: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = {"input": self.job.rel, "output": str(self.job.dst), "status": self.status}
        if self.reason:
            d["reason"] = self.reason
        if self.in_size:
            d.update(in_size=list(self.in_size), out_size=list(self.out_size), mode=self.mode,
                     bit_depth=self.bit_depth, tiles=self.tiles)
            if self.max_shift:
                d["tile_grid_shift_lr_px"] = round(self.max_shift, 4)
            d.update(time_s=round(self.decode_s + self.infer_s + self.encode_s, 4), decode_s=round(self.decode_s, 4),
                     infer_s=round(self.infer_s, 4), encode_s=round(self.encode_s, 4))
        if self.metrics:
            d.update(self.metrics)
        if self.notes:
            d["notes"] = self.notes
        return d


# -- reference metrics ------------------------------------------------------------------------------------

def _rgb_float(pixels: np.ndarray) -> np.ndarray:
    """Output-buffer layout (gray / BGR / BGRA, uint8/16) -> HxWx3 RGB float64 in [0, 1] for metrics."""
    maxv = 65535.0 if pixels.dtype == np.uint16 else 255.0
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[:, :, None], 3, axis=2)
    return pixels[:, :, 2::-1].astype(np.float64) / maxv


def find_reference(ref_dir: Path, rel: str) -> Path | None:
    exact = ref_dir / rel
    if exact.is_file():
        return exact
    stem = Path(rel).with_suffix("")
    for ext in imageio.FORMATS:
        p = ref_dir / stem.with_suffix(ext)
        if p.is_file():
            return p
    return None


def bicubic_pixels(image: Image, out_h: int, out_w: int) -> np.ndarray:
    """Plain bicubic upscale of the whole image (the baseline), in the output-buffer layout."""
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(image.region_rgb(0, image.height, 0, image.width))[None]
    y = F.interpolate(x, size=(out_h, out_w), mode="bicubic", align_corners=False)[0].numpy()
    out = imageio.new_output(out_h, out_w, 1 if image.gray else 3, image.depth)
    imageio.store_rgb(out, 0, 0, y, image.depth)
    return out


def reference_metrics(ref_dir: Path, rel: str, sr: np.ndarray, image: Image, scale: float) -> dict:
    from pipeline.analysis.metrics import psnr_y, ssim_y

    path = find_reference(ref_dir, rel)
    if path is None:
        return {"reference": "missing"}
    hr = imageio.read_image(path).pixels
    hr = hr[:, :, :3] if hr.ndim == 3 else hr
    h, w = sr.shape[:2]
    # HR sides that are not multiples of the scale lose up to `scale` pixels when downscaled: crop them.
    if not (0 <= hr.shape[0] - h <= math.ceil(scale) and 0 <= hr.shape[1] - w <= math.ceil(scale)):
        return {"reference": f"size {hr.shape[1]}x{hr.shape[0]} does not match the output {w}x{h}"}
    hr_f = _rgb_float(np.ascontiguousarray(hr[:h, :w]))
    sr_f = _rgb_float(sr[:, :, :3] if sr.ndim == 3 else sr)
    bic_f = _rgb_float(bicubic_pixels(image, h, w))
    border = math.ceil(scale)
    try:
        return {"reference": str(path), "psnr": psnr_y(sr_f, hr_f, border), "ssim": ssim_y(sr_f, hr_f, border),
                "psnr_bicubic": psnr_y(bic_f, hr_f, border), "ssim_bicubic": ssim_y(bic_f, hr_f, border)}
    except ValueError as e:
        return {"reference": str(e).splitlines()[0]}


# -- the run ------------------------------------------------------------------------------------------------

class Runner:
    def __init__(self, args, backend, spec, scale: float, log, warn):
        self.args = args
        self.backend = backend
        self.spec = spec
        self.scale = scale
        self.log = log
        self.warn = warn
        radius = tiling.receptive_radius(spec.name)
        self.margin = (tiling.context_margin(radius, scale) if args.tile_overlap is None
                       else math.ceil(max(0, args.tile_overlap) * scale))
        self.batch = max(1, args.batch)
        if args.tile is None:
            self.tile = tiling.auto_tile(scale, self.margin, self.batch)
        else:
            self.tile = None if args.tile <= 0 else max(1, args.tile)
        # Engines with bounded input shapes (TensorRT profiles): every crop must fit.
        max_in = getattr(backend, "max_input_size", None)
        if callable(max_in):
            limit = tiling.max_tile_for_input_limit(min(max_in()), scale, self.margin)
            if limit < 1:
                raise PipelineError(f"the backend's largest input {max_in()} is too small for tiles with "
                                    f"{self.margin} px of context at x{scale:g}; rebuild it with a larger profile")
            if self.tile is None or self.tile > limit:
                self.tile = limit
        profiles = getattr(backend, "profiles", None)
        if profiles:
            try:
                self.batch = min(self.batch, max(int(p.batch[2]) for p in profiles))
            except (AttributeError, TypeError, IndexError, ValueError):
                pass
        self.ref_dir = Path(args.reference) if args.reference else None

    def _infer(self, batch: np.ndarray) -> np.ndarray:
        return self.backend.infer(np.ascontiguousarray(batch, dtype=np.float32), self.scale)

    def prepare(self, rec: Record, image: Image):
        """Check the output is producible; returns (plan, output buffer)."""
        oh, ow = tiling.output_length(image.height, self.scale), tiling.output_length(image.width, self.scale)
        rec.in_size, rec.out_size = (image.width, image.height), (ow, oh)
        rec.mode, rec.bit_depth = image.mode, image.depth
        problem = output_problem(oh, ow, image.channels, image.depth, rec.job.fmt, self.backend)
        if problem:
            raise ImageError(problem)
        plan = tiling.plan(image.height, image.width, self.scale, self.tile, self.margin)
        rec.tiles, rec.max_shift = plan.count, plan.max_shift
        if not plan.exact:
            rec.notes.append(f"tile grid off the whole-image sampling grid by up to {plan.max_shift:.3f} input px "
                             f"(scale {self.scale:g} does not align with this size); output is close, not equal")
        return plan, imageio.new_output(oh, ow, image.channels, image.depth)

    def run_tiled(self, image: Image, plan: tiling.TilePlan, out: np.ndarray) -> None:
        depth = image.depth

        def write(t: tiling.Tile, y: np.ndarray) -> None:
            sy, sx = t.keep_slices()
            imageio.store_rgb(out, t.y.keep0, t.x.keep0, y[:, sy, sx], depth)
            if image.has_alpha:  # alpha: plain bicubic on the same crop, so it tiles exactly as well
                a = _bicubic_plane(image.region_alpha(t.y.crop0, t.y.crop1, t.x.crop0, t.x.crop1), t.out_shape)
                imageio.store_alpha(out, t.y.keep0, t.x.keep0, a[sy, sx], depth)

        tiling.run_tiles(plan, image.region_rgb, self._infer, write, self.batch)

    def run_batch(self, items: list[tuple[Record, Image, tiling.TilePlan, np.ndarray]]) -> None:
        """Whole images of one size in one inference call."""
        x = np.stack([im.region_rgb(0, im.height, 0, im.width) for _, im, _, _ in items])
        y = self._infer(x)
        del x
        for (rec, im, plan, out), yi in zip(items, y):
            imageio.store_rgb(out, 0, 0, yi, im.depth)
            if im.has_alpha:
                a = _bicubic_plane(im.region_alpha(0, im.height, 0, im.width), out.shape[:2])
                imageio.store_alpha(out, 0, 0, a, im.depth)


def _bicubic_plane(plane: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(plane))[None, None]
    return F.interpolate(x, size=tuple(size), mode="bicubic", align_corners=False)[0, 0].numpy()


def _decode(job: Job):
    t0 = time.perf_counter()
    try:
        image = imageio.read_image(job.src)
    except ImageError as e:
        return None, str(e), time.perf_counter() - t0
    except Exception as e:  # a decoder crash on one file must not stop the batch
        return None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", time.perf_counter() - t0
    return image, "", time.perf_counter() - t0


def _encode(rec: Record, out: np.ndarray, image: Image, runner: Runner) -> None:
    t0 = time.perf_counter()
    rec.notes.extend(imageio.write_image(rec.job.dst, out, rec.job.fmt, runner.args.jpeg_quality))
    rec.encode_s = time.perf_counter() - t0
    if runner.ref_dir is not None:
        try:
            rec.metrics = reference_metrics(runner.ref_dir, rec.job.rel, out, image, runner.scale)
        except ImageError as e:
            rec.metrics = {"reference": f"unreadable: {e}"}


def run(args) -> int:
    t_start = time.perf_counter()
    quiet = bool(args.quiet)
    spec, scale = check_model_and_scale(args.model, args.scale)
    fmt = None
    if args.fmt:
        try:
            fmt = imageio.normalize_format(args.fmt)
        except ValueError as e:
            raise PipelineError(str(e)) from None
    if args.batch < 1 or args.workers < 1:
        raise PipelineError("--batch and --workers must be at least 1")
    if args.reference and not Path(args.reference).is_dir():
        raise PipelineError(f"reference folder not found: {args.reference}")
    found = discover(args.input, args.output, fmt)
    if not found.jobs:
        raise PipelineError(f"no images found in {args.input} (extensions: {', '.join(sorted(imageio.FORMATS))})")

    from tqdm import tqdm

    lock = threading.Lock()

    def log(msg: str) -> None:
        if not quiet:
            with lock:
                tqdm.write(msg, file=sys.stderr)

    def warn(msg: str) -> None:
        with lock:
            tqdm.write(msg, file=sys.stderr)

    backend, note = create_backend(args.backend, args.model, args.precision, args.onnx, args.engine, args.weights,
                                   args.threads)
    log(f"sr: {spec.name} x{scale:g} on {backend.describe()}" + (f" ({note})" if note else "")
        + f"; {len(found.jobs)} image(s) -> {args.output}")
    if found.ignored:
        log(f"ignored {len(found.ignored)} file(s) without an image extension (e.g. {found.ignored[0]})")
    runner = Runner(args, backend, spec, scale, log, warn)

    records = [Record(j) for j in found.jobs]
    todo: list[Record] = []
    for rec in records:
        if rec.job.problem:
            rec.status, rec.reason = "failed", rec.job.problem
            warn(f"failed {rec.job.rel}: {rec.reason}")
        elif args.skip_existing and rec.job.dst.exists():
            rec.status, rec.reason = "skipped", "output exists"
        else:
            todo.append(rec)
    skipped = sum(r.status == "skipped" for r in records)
    if skipped:
        log(f"skipping {skipped} image(s) whose output exists")

    bar = tqdm(total=len(todo), unit="img", disable=quiet, file=sys.stderr, dynamic_ncols=True)
    done_mpix = 0.0
    t_loop = time.perf_counter()

    def fail(rec: Record, reason: str) -> None:
        rec.status, rec.reason = "failed", reason
        warn(f"failed {rec.job.rel}: {reason}")

    def finished(rec: Record) -> None:
        nonlocal done_mpix
        if rec.status == "ok" and rec.out_size:
            done_mpix += rec.out_size[0] * rec.out_size[1] / 1e6
        el = max(time.perf_counter() - t_loop, 1e-9)
        bar.set_postfix_str(f"{done_mpix / el:.2f} MPix/s", refresh=False)
        bar.update(1)

    readers = ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="sr-decode")
    writers = ThreadPoolExecutor(max_workers=args.workers, thread_name_prefix="sr-encode")
    decoding: deque[tuple[Record, Future]] = deque()
    writing: deque[tuple[Record, Future, int]] = deque()
    write_bytes = 0
    queue = deque(todo)

    def refill() -> None:
        while queue and len(decoding) < args.workers + PREFETCH + runner.batch:
            rec = queue.popleft()
            decoding.append((rec, readers.submit(_decode, rec.job)))

    def reap(block_until_bytes: int | None = None) -> None:
        nonlocal write_bytes
        while writing and (writing[0][1].done() or (block_until_bytes is not None and write_bytes > block_until_bytes)):
            rec, fut, nbytes = writing.popleft()
            try:
                fut.result()
                rec.status = "ok"
            except ImageError as e:
                fail(rec, str(e))
            except OSError as e:
                fail(rec, f"cannot write {rec.job.dst}: {e.strerror or e}")
            except Exception as e:  # an encoder or metrics crash on one image must not stop the batch
                fail(rec, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            write_bytes -= nbytes
            finished(rec)

    def submit_write(rec: Record, out: np.ndarray, image: Image) -> None:
        nonlocal write_bytes
        reap(WRITE_BYTES)  # bound the output buffers waiting for the encoder
        writing.append((rec, writers.submit(_encode, rec, out, image, runner), out.nbytes))
        write_bytes += out.nbytes
        log(f"{rec.job.rel}: {rec.in_size[0]}x{rec.in_size[1]} -> {rec.out_size[0]}x{rec.out_size[1]} "
            f"(x{scale:g}, {rec.mode} {rec.bit_depth}-bit, {rec.tiles} tile{'s' if rec.tiles != 1 else ''})")

    pending: list[tuple[Record, Image, tiling.TilePlan, np.ndarray]] = []  # whole images awaiting a batch

    def flush() -> None:
        if not pending:
            return
        t0 = time.perf_counter()
        try:
            runner.run_batch(pending)
        except Exception as e:
            reason = _infer_reason(e)
            for rec, _, _, _ in pending:
                fail(rec, reason)
                finished(rec)
        else:
            share = (time.perf_counter() - t0) / len(pending)
            for rec, im, _, out in pending:
                rec.infer_s = share
                submit_write(rec, out, im)
        pending.clear()

    try:
        refill()
        while decoding:
            rec, fut = decoding.popleft()
            refill()
            image, reason, rec.decode_s = fut.result()
            reap()
            if image is None:
                fail(rec, reason)
                finished(rec)
                continue
            try:
                plan, out = runner.prepare(rec, image)
            except ImageError as e:
                fail(rec, str(e))
                finished(rec)
                continue
            for n in rec.notes:
                log(f"{rec.job.rel}: {n}")
            if plan.whole and runner.batch > 1:
                if pending and pending[0][1].pixels.shape[:2] != image.pixels.shape[:2]:
                    flush()
                pending.append((rec, image, plan, out))
                if len(pending) >= runner.batch:
                    flush()
                continue
            flush()
            t0 = time.perf_counter()
            try:
                runner.run_tiled(image, plan, out)
            except Exception as e:
                fail(rec, _infer_reason(e))
                finished(rec)
                continue
            rec.infer_s = time.perf_counter() - t0
            submit_write(rec, out, image)
            del image, out
        flush()
        reap(-1)
    finally:
        readers.shutdown(wait=True, cancel_futures=True)
        writers.shutdown(wait=True)
        bar.close()

    wall = time.perf_counter() - t_start
    loop = time.perf_counter() - t_loop
    ok = [r for r in records if r.status == "ok"]
    failed = [r for r in records if r.status == "failed"]
    mpix = sum(r.out_size[0] * r.out_size[1] for r in ok) / 1e6
    summary = {
        "model": spec.name, "scale": scale, "backend": backend.describe(), "backend_choice": note or args.backend,
        "input": str(args.input), "output": str(args.output), "tile": runner.tile, "tile_margin_hr": runner.margin,
        "batch": runner.batch, "workers": args.workers,
        "counts": {"ok": len(ok), "failed": len(failed), "skipped": sum(r.status == "skipped" for r in records),
                   "ignored": len(found.ignored)},
        "wall_s": round(wall, 3), "process_s": round(loop, 3),
        "images_per_s": round(len(ok) / loop, 3) if loop > 0 else None,
        "mpix_per_s": round(mpix / loop, 3) if loop > 0 else None,
        "images": [r.as_dict() for r in records],
        "failures": [{"input": r.job.rel, "reason": r.reason} for r in failed],
        "ignored": found.ignored,
    }
    scored = [r.metrics for r in ok if "psnr" in r.metrics]
    if scored:
        summary["reference"] = {k: float(np.mean([m[k] for m in scored]))
                                for k in ("psnr", "ssim", "psnr_bicubic", "ssim_bicubic")}
        summary["reference"]["images"] = len(scored)
        ref = summary["reference"]
        log(f"reference ({len(scored)} image(s)): PSNR-Y {ref['psnr']:.2f} dB (bicubic {ref['psnr_bicubic']:.2f}), "
            f"SSIM-Y {ref['ssim']:.4f} (bicubic {ref['ssim_bicubic']:.4f})")
    if args.summary:
        atomic_write(Path(args.summary), (json.dumps(summary, indent=2) + "\n").encode())
    log(f"done: {len(ok)} ok, {len(failed)} failed, {summary['counts']['skipped']} skipped in {wall:.1f} s "
        f"({summary['images_per_s']} images/s, {summary['mpix_per_s']} MPix/s output)")
    if failed:
        warn(f"{len(failed)} image(s) failed: " + ", ".join(r.job.rel for r in failed[:5])
             + (" ..." if len(failed) > 5 else ""))
    return 1 if failed else 0


def _infer_reason(e: BaseException) -> str:
    if isinstance(e, PipelineError):
        return str(e)
    if isinstance(e, MemoryError):
        return "out of memory during inference (try a smaller --tile)"
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"inference failed: {type(e).__name__}{': ' + msg if msg else ''}"
