"""The host side of a run, measured on every machine (issue 58): `pipeline sr` on a stand-in device (the
`stand-in` backend: integer pixels in, the input's nearest-neighbour x3 out, 0.4 ms of device time per output
megapixel spent asleep), so what is timed is the host's work around a fast device.

Two rows at full size, each `"backend": "stand-in"`:
- folder: 16 x 512^2 PNG -> 1536^2 PNG;
- video: a 640x360 H.264 clip -> 1080p H.264 at sr's defaults, with its frames/s against the encoder alone on the
  same output frames and threads, the writer's RGB -> YUV conversion included (`of_encoder`).
Each has, per output megapixel, the CPU time of the thread that drives inference (`serial_cpu_ms_per_mpix`: what
cannot spread over cores) and of the whole process (`host_cpu_ms_per_mpix`). A first run fills the stand-in's
outputs (each made once per input) and warms the encoders; the timed runs follow, the video's alternating with
the encoder alone, and each figure is the median. The goals (with the stand-in, on the CPU that runs the bench):
folder serial <= 0.4 and host <= 8 ms per MPix, video serial <= 1.0, of_encoder >= 0.85.
"""
from __future__ import annotations

import resource
import statistics
import tempfile
import time
from pathlib import Path

from pipeline import backends, sr
from pipeline.bench.folder import write_folder
from pipeline.bench.verdicts import goal_mark, noise_mark
from pipeline.report import runs_phrase
from pipeline.sr import upscale

MODEL = "srcnn-x3"  # its spec only (scale, tiling): the stand-in runs no model
GOALS = {"folder": {"serial_cpu_ms_per_mpix": 0.4, "host_cpu_ms_per_mpix": 8.0},
         "video": {"serial_cpu_ms_per_mpix": 1.0, "of_encoder": 0.85}}
VIDEO_SIZE = (640, 360)


def _cpu_s() -> float:
    """CPU seconds of this process, every thread."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _run(src: Path, dst: Path, be) -> tuple[object, float, float]:
    """One `upscale` of src on the stand-in: (its Summary, process CPU seconds, wall seconds)."""
    c0, t0 = _cpu_s(), time.perf_counter()
    s = upscale(src, dst, model=MODEL, backend=be, progress=False, log=lambda _msg: None)
    cpu, wall = _cpu_s() - c0, time.perf_counter() - t0
    if s.failed:
        raise RuntimeError(f"stand-in run: {s.failed[0].reason}")
    return s, cpu, wall


def _per_mpix(runs: list[tuple], mpix: float) -> dict:
    serial = [s.executor["serial_cpu_s"] for s, _, _ in runs]
    return {"out_mpix": round(mpix, 3), "repeats": len(runs),
            "serial_cpu_ms_per_mpix": round(1e3 * statistics.median(serial) / mpix, 3),
            "host_cpu_ms_per_mpix": round(1e3 * statistics.median(c for _, c, _ in runs) / mpix, 3),
            "wall_ms_per_mpix": round(1e3 * statistics.median(w for _, _, w in runs) / mpix, 3),
            "runs_serial_cpu_s": serial, "runs_host_cpu_s": [round(c, 4) for _, c, _ in runs],
            "runs_wall_s": [round(w, 4) for _, _, w in runs]}


def _meets(kind: str, row: dict) -> dict:
    goals = GOALS[kind]
    ok = all(row[k] >= v if k == "of_encoder" else row[k] <= v for k, v in goals.items() if row.get(k) is not None)
    return {"goals": goals, "meets_goals": ok}


def _mark(row: dict, key: str) -> str:
    """'goal <= 8', or 'goal <= 8: MISSED', for one of the row's goals."""
    goal = row["goals"][key]
    if key == "of_encoder":
        return goal_mark(f">= {100 * goal:.0f} %", row[key] >= goal)
    return goal_mark(f"<= {goal:g}", row[key] <= goal)


def folder_row(n_images: int = 16, size: int = 512, repeats: int = 3, log=print) -> dict:
    """The folder run on the stand-in: CPU per output megapixel of the driving thread and of the process."""
    be = backends.stand_in(MODEL)
    with tempfile.TemporaryDirectory(prefix="sr-host-folder-") as tmp:
        src = Path(tmp) / "in"
        write_folder(src, n_images, size)
        _run(src, Path(tmp) / "warm", be)
        runs = [_run(src, Path(tmp) / f"out{r}", be) for r in range(max(1, repeats))]
    mpix = runs[0][0].out_mpix
    row = {"kind": "folder", "backend": be.name, "backend_description": be.describe(), "model": MODEL,
           "images": n_images, "size": size, "scale": 3.0, "workers": runs[0][0].workers, **_per_mpix(runs, mpix)}
    row["ms_per_image"] = round(1e3 * statistics.median(w for _, _, w in runs) / n_images, 3)
    row |= _meets("folder", row)
    log(f"  host side, folder ({n_images} x {size}^2 -> x3 PNG, stand-in device, {runs_phrase(len(runs))}): "
        f"driving thread {row['serial_cpu_ms_per_mpix']:.2f} ms CPU per output MPix "
        f"({_mark(row, 'serial_cpu_ms_per_mpix')}), process {row['host_cpu_ms_per_mpix']:.1f} ms "
        f"({_mark(row, 'host_cpu_ms_per_mpix')}), {row['ms_per_image']:.1f} ms per image"
        + noise_mark(row["runs_host_cpu_s"], "s CPU"))
    return row


def video_row(frames: int = 48, repeats: int = 3, log=print) -> dict:
    """The video run on the stand-in (640x360 -> 1080p H.264 at sr's defaults) against the encoder alone on the
    same frames and threads, alternating."""
    from pipeline.bench.video import write_clip  # PyAV: only for the runs that make clips

    be = backends.stand_in(MODEL)
    w, h = VIDEO_SIZE
    with tempfile.TemporaryDirectory(prefix="sr-host-video-") as tmp:
        clip = write_clip(Path(tmp) / "in.mp4", w, h, frames)
        _run(clip, Path(tmp) / "warm.mp4", be)
        runs, alone = [], []
        for r in range(max(1, repeats)):
            runs.append(_run(clip, Path(tmp) / f"out{r}.mp4", be))
            seconds, n = sr.encoder_alone(clip, Path(tmp) / f"alone{r}.mp4", 3.0, runs[-1][0].workers,
                                       lambda p: be.infer_pixels(p[None], 3.0)[0])
            alone.append(n / seconds)
    rec = runs[0][0].records[0]
    fps = [s.records[0].video["fps"] for s, _, _ in runs]
    row = {"kind": "video", "backend": be.name, "backend_description": be.describe(), "model": MODEL,
           "input": [w, h], "output": list(rec.out_size), "frames": frames, "codec": rec.video["codec"],
           "preset": rec.video["preset"], "workers": runs[0][0].workers,
           **_per_mpix(runs, runs[0][0].out_mpix), "fps": round(statistics.median(fps), 2),
           "encoder_fps": round(statistics.median(alone), 2), "runs_fps": fps,
           "runs_encoder_fps": [round(a, 2) for a in alone]}
    row["of_encoder"] = round(row["fps"] / row["encoder_fps"], 3)
    row["of_encoder_best"] = round(max(fps) / max(alone), 3)
    row |= _meets("video", row)
    log(f"  host side, video ({w}x{h} -> {rec.out_size[0]}x{rec.out_size[1]} {row['codec']} {row['preset']}, "
        f"{frames} frames, stand-in device, {runs_phrase(len(runs))}): {row['fps']:.1f} fps, "
        f"{100 * row['of_encoder']:.0f} % of the encoder alone ({row['encoder_fps']:.1f} fps, {row['workers']} "
        f"threads; {_mark(row, 'of_encoder')}); driving thread {row['serial_cpu_ms_per_mpix']:.2f} ms CPU per output "
        f"MPix ({_mark(row, 'serial_cpu_ms_per_mpix')}), process {row['host_cpu_ms_per_mpix']:.1f} ms"
        + noise_mark(row["runs_fps"], "fps"))
    return row
