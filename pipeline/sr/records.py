"""What the sr stage reports: a Record per image and the run's Summary (`Summary.to_dict()` is the
`--summary` JSON)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pipeline.sr.jobs import Job

REFERENCE_KEYS = ("psnr", "ssim", "psnr_bicubic", "ssim_bicubic")


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
    video: dict = field(default_factory=dict)  # a clip's frames, duration, frame rates, fps, time per frame

    def fail(self, reason: str) -> None:
        self.status, self.reason = "failed", reason

    @property
    def pictures(self) -> int:
        """Pictures this record made: an image is one, a clip its frames."""
        return int(self.video.get("frames", 0)) if self.job.video else 1

    @property
    def out_mpix(self) -> float:
        """Output megapixels written: every frame of a clip counts."""
        return self.out_size[0] * self.out_size[1] * self.pictures / 1e6 if self.out_size else 0.0

    @property
    def scored(self) -> bool:
        return "psnr" in self.metrics

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
        if self.video:
            d["video"] = self.video
        if self.metrics:
            d.update(self.metrics)
        if self.notes:
            d["notes"] = self.notes
        return d


def _rate(amount: float, seconds: float) -> float | None:
    return round(amount / seconds, 3) if seconds > 0 else None


@dataclass
class Summary:
    """One sr run: settings, per-image records and totals."""

    model: str
    scale: float
    backend: str            # backend.describe()
    backend_choice: str     # why this backend ("auto: ...", "requested: ...")
    input: str
    output: str
    tile: int | None
    tile_margin_hr: int
    batch: int
    workers: int
    records: list[Record]
    ignored: list[str] = field(default_factory=list)
    wall_s: float = 0.0     # the whole call, backend loading included
    process_s: float = 0.0  # decoding the first image to writing the last
    setup_s: float = 0.0    # the call's start to the first decode: checks, backend load (and an export on first use)
    interrupted: bool = False  # Ctrl-C: the records still "pending" were not done

    def _with(self, status: str) -> list[Record]:
        return [r for r in self.records if r.status == status]

    @property
    def ok(self) -> list[Record]:
        return self._with("ok")

    @property
    def failed(self) -> list[Record]:
        return self._with("failed")

    @property
    def skipped(self) -> list[Record]:
        return self._with("skipped")

    @property
    def counts(self) -> dict[str, int]:
        c = {"ok": len(self.ok), "failed": len(self.failed), "skipped": len(self.skipped), "ignored": len(self.ignored)}
        if self.interrupted:
            c["not_done"] = len(self._with("pending"))
        return c

    @property
    def pictures(self) -> int:
        """Images and video frames written."""
        return sum(r.pictures for r in self.ok)

    @property
    def out_mpix(self) -> float:
        return sum(r.out_mpix for r in self.ok)

    @property
    def overall_images_per_s(self) -> float | None:
        """Images (and video frames) per second over the whole call, setup included (what a user waits for)."""
        return _rate(self.pictures, self.wall_s)

    @property
    def overall_mpix_per_s(self) -> float | None:
        return _rate(self.out_mpix, self.wall_s)

    @property
    def images_per_s(self) -> float | None:
        """Images (and video frames) per second of processing."""
        return _rate(self.pictures, self.process_s)

    @property
    def mpix_per_s(self) -> float | None:
        return _rate(self.out_mpix, self.process_s)

    @property
    def failures(self) -> list[dict]:
        return [{"input": r.job.rel, "reason": r.reason} for r in self.failed]

    @property
    def reference(self) -> dict | None:
        """Mean scores over the images that had a matching reference, or None."""
        scored = [r.metrics for r in self.ok if r.scored]
        if not scored:
            return None
        means = {k: float(np.mean([m[k] for m in scored])) for k in REFERENCE_KEYS}
        return {**means, "images": len(scored)}

    def to_dict(self) -> dict:
        d = {
            "model": self.model, "scale": self.scale, "backend": self.backend, "backend_choice": self.backend_choice,
            "input": self.input, "output": self.output, "tile": self.tile, "tile_margin_hr": self.tile_margin_hr,
            "batch": self.batch, "workers": self.workers, "counts": self.counts,
            "wall_s": round(self.wall_s, 3), "setup_s": round(self.setup_s, 3), "process_s": round(self.process_s, 3),
            "images_per_s": self.images_per_s, "mpix_per_s": self.mpix_per_s,
            "overall_images_per_s": self.overall_images_per_s, "overall_mpix_per_s": self.overall_mpix_per_s,
            "images": [r.as_dict() for r in self.records], "failures": self.failures, "ignored": self.ignored,
        }
        if self.reference:
            d["reference"] = self.reference
        if self.interrupted:
            d["interrupted"] = True
        return d
