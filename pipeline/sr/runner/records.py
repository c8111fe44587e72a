"""What the sr stage reports: a Record per image or clip, the RecordLog of a run and its Summary
(`Summary.write()` is the `--summary` JSON)."""
from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.artifacts.atomic import atomic_path
from pipeline.sr.runner.jobs import Job

REFERENCE_KEYS = ("psnr", "ssim", "psnr_bicubic", "ssim_bicubic")
MISSING = "missing"  # a record's metrics["reference"] when --reference has no file of its name


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
    cpu_s: dict = field(default_factory=dict)  # a clip's CPU seconds per stage (pipeline.sr.video.cpu_split)
    metrics: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    video: dict = field(default_factory=dict)  # a clip's frames, duration, frame rates, fps, time per frame
    rerun: int = 0          # tiles (whole images, frames) whose output was not finite, re-run at fp32
    rerun_reason: str = ""  # why ('non-finite fp16 output')

    def take(self, planned) -> None:
        """What ImageWorker.plan found (a pipeline.sr.runner.worker.Planned): sizes, layout, tiles, its notes."""
        self.in_size, self.out_size = planned.in_size, planned.out_size
        self.mode, self.bit_depth = planned.image.mode, planned.image.depth
        self.tiles, self.max_shift = planned.plan.count, planned.plan.max_shift
        self.notes.extend(planned.notes)

    def inferred(self, planned) -> None:
        """What inference did to a planned image or frame (time, tiles re-run at fp32); a clip adds its frames'."""
        self.infer_s += planned.infer_s
        if planned.rerun:
            self.rerun += planned.rerun
            self.rerun_reason = planned.rerun_reason

    def fail(self, reason: str) -> None:
        self.status, self.reason = "failed", reason

    @property
    def pictures(self) -> int:
        """Pictures this record made: an image is one, a clip the frames this run upscaled (not those of segments a
        killed run made, taken with --skip-existing: the run's frames/s counts its own work)."""
        return int(self.video.get("frames", 0)) - int(self.video.get("frames_reused", 0)) if self.job.video else 1

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
        if self.cpu_s:
            d["cpu_s"] = {k: round(v, 3) for k, v in self.cpu_s.items()}
        if self.video:
            d["video"] = self.video
        if self.rerun:
            d["rerun_fp32"] = {"tiles": self.rerun, "reason": self.rerun_reason}
        if self.metrics:
            d.update(self.metrics)
        if self.notes:
            d["notes"] = self.notes
        return d


    @classmethod
    def from_dict(cls, d: dict, job: Job) -> Record:
        """The record another process made of `job` (a Ray actor's `as_dict()`), for the driver's RecordLog."""
        rec = cls(job, status=d["status"], reason=d.get("reason", ""), notes=list(d.get("notes", [])),
                  video=dict(d.get("video", {})))
        if d.get("in_size"):
            rec.in_size, rec.out_size = tuple(d["in_size"]), tuple(d["out_size"])
            rec.mode, rec.bit_depth, rec.tiles = d["mode"], d["bit_depth"], d["tiles"]
            rec.max_shift = d.get("tile_grid_shift_lr_px", 0.0)
            rec.decode_s, rec.infer_s, rec.encode_s = d["decode_s"], d["infer_s"], d["encode_s"]
        rec.cpu_s = dict(d.get("cpu_s", {}))
        rec.metrics = {k: d[k] for k in (*REFERENCE_KEYS, "reference") if k in d}
        rerun = d.get("rerun_fp32") or {}
        rec.rerun, rec.rerun_reason = int(rerun.get("tiles", 0)), str(rerun.get("reason", ""))
        return rec


def _rate(amount: float, seconds: float) -> float | None:
    return round(amount / seconds, 3) if seconds > 0 else None


STAGES = ("decode", "inference", "encode")  # a clip's three threads, in the done line's order


class RecordLog:
    """A run's records as they finish, with the totals every summary reports kept as they come. The records
    themselves are kept (the Python API's `Summary.records`) or, for a run that streams them (Ray, any number of
    images), only spooled to an anonymous temp file beside --summary, so the driver's memory stays flat."""

    def __init__(self, keep: bool = True, spool_beside: str | Path | None = None):
        self.records: list[Record] = []
        self.keep = keep
        self.counts = {"ok": 0, "failed": 0, "skipped": 0, "pending": 0}
        self.pictures = self.frames = 0
        self.out_mpix = 0.0
        self.video_stage_s = dict.fromkeys(STAGES, 0.0)  # the clips' seconds per stage (the done line's split)
        self.failures: list[dict] = []          # {"input", "reason"}
        self.failed_videos = 0
        self.unmatched = 0                        # ok outputs with no reference file of the same name
        self.scores = dict.fromkeys(REFERENCE_KEYS, 0.0)
        self.scored = 0
        self.rerun = {"tiles": 0, "inputs": 0, "reasons": []}  # re-run at fp32 (records written ok)
        self._spool = None
        if not keep and spool_beside is not None:
            folder = Path(spool_beside).parent
            folder.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{Path(spool_beside).name}.", suffix=".spool", dir=folder)
            os.unlink(name)  # anonymous: gone with the process, whatever happens
            self._spool = os.fdopen(fd, "w+")

    def add(self, rec: Record) -> None:
        self.counts[rec.status] = self.counts.get(rec.status, 0) + 1
        if rec.status == "failed":
            self.failures.append({"input": rec.job.rel, "reason": rec.reason})
            self.failed_videos += rec.job.video
        elif rec.status == "ok":
            self._count_rerun(rec)
            self.pictures += rec.pictures
            self.frames += rec.pictures if rec.job.video else 0
            if rec.job.video:  # CPU seconds where measured, else each stage's busy wall time
                busy = (rec.decode_s, rec.infer_s, rec.encode_s)
                for k, s in zip(STAGES, [rec.cpu_s[k] for k in STAGES] if rec.cpu_s else busy, strict=True):
                    self.video_stage_s[k] += s
            self.out_mpix += rec.out_mpix
            if rec.scored:
                self.scored += 1
                for k in REFERENCE_KEYS:
                    self.scores[k] += rec.metrics[k]
            elif rec.metrics.get("reference") == MISSING:
                self.unmatched += 1
        if self.keep:
            self.records.append(rec)
        elif self._spool is not None:
            self._spool.write(json.dumps(rec.as_dict()) + "\n")

    def _count_rerun(self, rec: Record) -> None:
        if rec.rerun:
            self.rerun["tiles"] += rec.rerun
            self.rerun["inputs"] += 1
            if rec.rerun_reason not in self.rerun["reasons"]:
                self.rerun["reasons"].append(rec.rerun_reason)

    def image_dicts(self) -> Iterator[dict]:
        if self.keep:
            yield from (r.as_dict() for r in self.records)
        elif self._spool is not None:
            self._spool.flush()
            self._spool.seek(0)
            yield from (json.loads(line) for line in self._spool)

    @property
    def reference(self) -> dict | None:
        """Mean scores over the images that had a matching reference, or None."""
        if not self.scored:
            return None
        return {**{k: v / self.scored for k, v in self.scores.items()}, "images": self.scored}

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None


@dataclass
class Summary:
    """One sr run, whatever executed it (pipeline.sr.flow): settings, the RecordLog and totals. `to_dict()` is
    the `--summary` JSON, with the same keys for every executor; `executor` says which ran it and its own facts."""

    model: str
    scale: float
    backend: str            # backend.describe(), or what the server / the actors ran
    backend_choice: str     # why this backend ("auto: ...", "requested: ...")
    executor: dict          # {"name": "local" | "ray" | "triton", ...its facts}
    input: str
    output: str
    tile: int | None
    tile_margin_hr: int
    batch: int
    workers: int
    log: RecordLog
    ignored: list[str] = field(default_factory=list)
    wall_s: float = 0.0     # the whole call, backend loading included
    process_s: float = 0.0  # decoding the first image to writing the last
    setup_s: float = 0.0    # the call's start to the first decode: checks, backend load (and an export on first use)
    interrupted: bool = False  # Ctrl-C: the records still "pending" were not done
    stopped: str = ""          # why the executor could not go on (a server that stopped answering)
    reference_dir: str | None = None  # --reference, if given
    quality: dict | None = None  # the precision's measured loss and verdict (gain_kept), or fp32's gain over bicubic

    @property
    def exit_code(self) -> int:
        """The CLI's: 1 when an input failed or the run was cut short, else 0."""
        return 1 if self.log.counts["failed"] or self.stopped else 0

    @property
    def records(self) -> list[Record]:
        """Every record, in job order (empty for a run that streamed its records: the counts still hold)."""
        return self.log.records

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
        c = {k: self.log.counts[k] for k in ("ok", "failed", "skipped")} | {"ignored": len(self.ignored)}
        if self.interrupted:
            c["not_done"] = self.log.counts["pending"]
        return c

    @property
    def pictures(self) -> int:
        """Images and video frames written."""
        return self.log.pictures

    @property
    def out_mpix(self) -> float:
        return self.log.out_mpix

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
        return self.log.failures

    @property
    def reference(self) -> dict | None:
        return self.log.reference

    def header(self) -> dict:
        """Every key of the summary but the per-record lists."""
        d = {
            "model": self.model, "scale": self.scale, "backend": self.backend, "backend_choice": self.backend_choice,
            "executor": self.executor, "input": self.input, "output": self.output, "tile": self.tile,
            "tile_margin_hr": self.tile_margin_hr, "batch": self.batch, "workers": self.workers, "counts": self.counts,
            "wall_s": round(self.wall_s, 3), "setup_s": round(self.setup_s, 3), "process_s": round(self.process_s, 3),
            "images_per_s": self.images_per_s, "mpix_per_s": self.mpix_per_s,
            "overall_images_per_s": self.overall_images_per_s, "overall_mpix_per_s": self.overall_mpix_per_s,
        }
        d["quality"] = self.quality  # every executor's summary has the key (null: nothing measured for this run)
        if self.log.frames:  # where the clips' time went: each stage's busy seconds (the done line's split)
            d["video_stage_s"] = {k: round(v, 3) for k, v in self.log.video_stage_s.items()}
        if self.reference:
            d["reference"] = self.reference
        if self.log.rerun["tiles"]:
            d["rerun_fp32"] = self.log.rerun
        if self.interrupted:
            d["interrupted"] = True
        return d

    def to_dict(self) -> dict:
        return {**self.header(), "images": list(self.log.image_dicts()), "failures": self.failures,
                "ignored": self.ignored}

    def write(self, path: Path) -> None:
        """The --summary JSON, atomically, one record a line (streamed from the log: no list of them in memory)."""
        with atomic_path(path) as tmp, open(tmp, "w") as f:
            f.write(json.dumps(self.header(), indent=2)[:-2] + ',\n  "images": [')
            for i, rec in enumerate(self.log.image_dicts()):
                f.write(("," if i else "") + "\n    " + json.dumps(rec))
            f.write("\n  ],\n" + json.dumps({"failures": self.failures, "ignored": self.ignored}, indent=2)[2:]
                    + "\n")
