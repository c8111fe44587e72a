"""What the `sr` Triton model does with a batch of requests, without Triton: decode, plan, infer (tiled or
batched whole images) and answer with the sr stage's own steps (pipeline.sr.ImageWorker), so served
pixels are the local run's pixels. The Python-backend adapter (python_model/model.py) only moves tensors.

The request interface is pipeline.serve.tensors. One request's problem (a corrupt image, a
scale out of range) is that request's error; the others in the batch are answered."""
from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline import backends
from pipeline.artifacts.identity import resolve
from pipeline.backends.checks import check_scale
from pipeline.backends.registry import backend_class
from pipeline.engine import read_sidecar
from pipeline.errors import PipelineError, first_line
from pipeline.serve.tensors import ARRAY, ARRAY_INPUTS, IMAGE_INPUTS, array_from_output
from pipeline.sr import (
    HeaderError,
    Image,
    ImageError,
    ImageWorker,
    Planned,
    convert_for_format,
    decode_image,
    encode_image,
    infer_reason,
    normalize_format,
    over_limit,
)

log = logging.getLogger(__name__)


class RequestError(Exception):
    """One request cannot be answered; the message is the one-line reason the client gets."""


def client_reason(e: BaseException) -> str:
    """What the client is told when reading its request raised: our own one line, else only the exception's type
    (its text may carry the server's paths; the server's log gets it whole)."""
    if isinstance(e, RequestError):
        return str(e)
    log.warning("a request could not be read", exc_info=e)
    return f"the request could not be read ({type(e).__name__}; see the server's log)"


def image_from_array(a: np.ndarray) -> Image:
    """RGB(A)/gray HxWxC integer pixels -> an Image (BGR(A) like a decoded file), held to the pixel limit."""
    if a.ndim != 3 or a.shape[2] not in (1, 3, 4) or min(a.shape[:2]) < 1:
        raise RequestError(f"pixels must be H x W x C with C = 1, 3 or 4, got shape {list(a.shape)}")
    try:
        big = over_limit(a.shape[1], a.shape[0], "pixels array")
    except HeaderError as e:  # a bad SRDEPLOY_MAX_PIXELS in the server's environment
        raise RequestError(str(e)) from None
    if big:
        raise RequestError(big)
    if a.shape[2] == 1:
        return Image(a[:, :, 0])
    order = [2, 1, 0, 3][:a.shape[2]]
    return Image(np.ascontiguousarray(a[:, :, order]))


def _text(value) -> str:
    try:
        return value.decode() if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError:
        raise RequestError("format is not UTF-8 text") from None


@dataclass
class _Item:
    """One image of one request."""
    request: int
    index: int
    fmt: str
    quality: int
    worker: ImageWorker
    planned: Planned | None = None
    t0: float = field(default_factory=time.perf_counter)


class SrService:
    """One loaded backend and the workers (one per scale) that share it."""

    def __init__(self, model_file: str | Path, backend: str = "ort", *, max_batch: int = 1, threads: int | None = None,
                 tile: int | None = None, device: int | None = None):
        model_file = Path(model_file)
        self.is_engine = model_file.suffix in (".engine", ".plan")
        where = {"engine": model_file} if self.is_engine else {"onnx": model_file}
        self.spec = resolve(None, **where)
        desc = backend_class(backend).DESCRIPTOR
        typed = {}
        if device is not None and "device" in desc.option_names():  # the GPU Triton gave this instance
            typed["device"] = device
        if "shrink_arena" in desc.option_names():  # a server idles between requests: memory a large one took goes back
            typed["shrink_arena"] = True
        precision = "fp32" if not self.is_engine else _engine_precision(model_file)
        request = backends.BackendRequest(backend, precision, threads=threads or None,
                                          options=desc.options(**typed) if typed else None, **where)
        self.choice = backends.choose(request, None, here=True)
        self.backend = backends.load(self.choice)  # as the local executor loads it
        self.max_batch = max(1, max_batch)
        self.tile = tile
        self.workers: dict[float, ImageWorker] = {}

    def describe(self) -> str:
        return self.backend.describe()

    def worker(self, scale: float) -> ImageWorker:
        if scale not in self.workers:
            # batch 1: tiles sized and run one at a time exactly as the local run's default (--batch 1) does, so
            # large images tile the same way (ORT's float sums depend on the crop shape); whole images of one size
            # are batched across requests by _infer
            self.workers[scale] = ImageWorker(self.backend, self.spec, scale, tile=self.tile, batch=1)
        return self.workers[scale]

    # -- one request's inputs -> items ----------------------------------------------------------------------

    def _images(self, req: dict) -> list[Image]:
        given = [k for k in IMAGE_INPUTS if req.get(k) is not None]
        if len(given) != 1:
            raise RequestError(f"give exactly one of {', '.join(IMAGE_INPUTS)} (got {', '.join(given) or 'none'})")
        if given[0] == "image_bytes":
            images = []
            for v in np.asarray(req["image_bytes"], dtype=object).reshape(-1):
                try:
                    images.append(decode_image(bytes(v)))
                except ImageError as e:
                    raise RequestError(str(e)) from None
                except Exception as e:  # a decoder crash on one request must not stop the others
                    raise RequestError(f"{type(e).__name__}: {first_line(e)}") from None
            return images
        a = np.asarray(req[given[0]])
        if a.dtype != ARRAY_INPUTS[given[0]]:
            raise RequestError(f"{given[0]} must be {np.dtype(ARRAY_INPUTS[given[0]]).name}, got {a.dtype}")
        if a.ndim == 3:
            a = a[None]
        return [image_from_array(x) for x in a]

    @staticmethod
    def _per_image(req: dict, key: str, n: int, default):
        v = req.get(key)
        if v is None:
            return [default] * n
        flat = list(np.asarray(v).reshape(-1))
        if len(flat) == 1:
            return flat * n
        if len(flat) != n:
            raise RequestError(f"{key} has {len(flat)} values for {n} image(s)")
        return flat

    def _items(self, r: int, req: dict) -> list[_Item]:
        images = self._images(req)
        n = len(images)
        scales = self._per_image(req, "scale", n, self.spec.default_scale)
        fmts = self._per_image(req, "format", n, ARRAY)
        qualities = self._per_image(req, "quality", n, 95)
        items = []
        for i, image in enumerate(images):
            try:
                scale = check_scale(self.spec, float(scales[i]))
            except PipelineError as e:
                raise RequestError(str(e)) from None
            fmt = _text(fmts[i]).lower()
            if fmt != ARRAY:
                try:
                    fmt = normalize_format(fmt)
                except (ImageError, PipelineError, ValueError) as e:
                    raise RequestError(str(e)) from None
            quality = int(qualities[i])
            if not 1 <= quality <= 100:
                raise RequestError(f"quality must be 1-100, got {quality}")
            item = _Item(r, i, fmt, quality, self.worker(scale))
            try:
                item.planned = item.worker.plan(image, "png" if fmt == ARRAY else fmt)
            except ImageError as e:
                raise RequestError(str(e)) from None
            items.append(item)
        return items

    # -- inference ----------------------------------------------------------------------------------------------

    def _infer(self, items: list[_Item]) -> dict[int, str]:
        """Run every item; returns request -> error for the requests whose inference failed."""
        failed: dict[int, str] = {}
        groups: dict[tuple, list[_Item]] = {}
        for it in items:
            p = it.planned
            if p.plan.whole and self.max_batch > 1:  # whole images of one size and scale: one call
                groups.setdefault((it.worker.scale, p.image.height, p.image.width), []).append(it)
            else:
                try:
                    it.worker.infer_tiled(p)
                except Exception as e:  # this request fails, the others go on
                    failed[it.request] = infer_reason(e)
        for group in groups.values():
            for i in range(0, len(group), self.max_batch):
                chunk = group[i:i + self.max_batch]
                try:
                    chunk[0].worker.infer_batch([it.planned for it in chunk])
                except Exception as e:
                    for it in chunk:
                        failed[it.request] = infer_reason(e)
        return failed

    def _answer(self, it: _Item) -> dict:
        p = it.planned
        info = {"in_size": list(p.in_size), "out_size": list(p.out_size), "mode": p.image.mode,
                "bit_depth": p.image.depth, "tiles": p.plan.count, "scale": it.worker.scale,
                "backend": self.describe(), "infer_s": round(p.infer_s, 6)}
        if p.rerun:  # tiles whose output was not finite, re-run at fp32 (pipeline.sr.runner.finite)
            info["rerun_fp32"] = {"tiles": p.rerun, "reason": p.rerun_reason}
        notes = list(p.notes)
        if it.fmt == ARRAY:
            out = {"output_u16" if p.out.dtype == np.uint16 else "output_u8": array_from_output(p.out)}
        else:
            pixels, more = convert_for_format(p.out, it.fmt)
            notes += more
            out = {"output_bytes": encode_image(pixels, it.fmt, it.quality)}
        info["notes"] = notes
        info["server_s"] = round(time.perf_counter() - it.t0, 6)
        out["info"] = json.dumps(info)
        return out

    def run(self, requests: list[dict | Exception]) -> list[dict | str]:
        """Answer each request: {output name: value for one image} per image, stacked per request by the
        adapter, or the one-line reason it failed (a str). A request is its input tensors, or the exception the
        adapter met reading them; any exception reading one request fails that request alone."""
        results: list[list[dict] | str] = [[] for _ in requests]
        items: list[_Item] = []
        for r, req in enumerate(requests):
            try:
                if isinstance(req, Exception):
                    raise req
                items.extend(self._items(r, req))
            except Exception as e:  # one request's problem, whatever raised it: the batch goes on
                results[r] = client_reason(e)
        failed = self._infer(items)
        for it in items:
            if isinstance(results[it.request], str):
                continue
            if it.request in failed:
                results[it.request] = failed[it.request]
                continue
            try:
                results[it.request].append(self._answer(it))
            except Exception as e:  # an encoder failure on one request
                results[it.request] = f"{type(e).__name__}: {first_line(e)}" if not isinstance(e, ImageError) \
                    else str(e)
        answers = [res if isinstance(res, str) else stack(res) for res in results]
        del items
        _give_back_heap()
        return answers


def _give_back_heap() -> None:
    """Return the heap's free pages to the system (glibc keeps freed large blocks mapped otherwise)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to do
        ctypes.CDLL(None).malloc_trim(0)


def stack(answers: list[dict]) -> dict | str:
    """Per-image answers of one request -> tensors with the batch dimension first."""
    out = {}
    for key in answers[0]:
        values = [a.get(key) for a in answers]
        if any(v is None for v in values):
            return "the images of one request must be answered in one output (same bit depth)"
        if isinstance(values[0], np.ndarray):
            if len({v.shape for v in values}) != 1:
                return "the images of one request have outputs of different shapes; send them one per request"
            out[key] = np.stack(values)
        else:
            out[key] = np.array([[v.encode() if isinstance(v, str) else v] for v in values], dtype=np.object_)
    return out


def _engine_precision(engine: Path) -> str:

    return (read_sidecar(engine) or {}).get("precision", "fp32")
