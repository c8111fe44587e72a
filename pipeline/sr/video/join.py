"""A clip's finished segments joined into its output by stream copy (no second encode), with the source's audio
and subtitle packets copied once, in time order, in the local run's layout and tags.

Each video packet gets back the timestamps its encoder gave it (the segment's record: NUT keeps no decode times
and shifts negative ones), so B-frames and their reordering survive the join. Segment k's first decode time can
fall at or before segment k-1's last (each encoder starts its own reorder delay); such a packet's decode time is
moved up to one tick past the one before, never past its presentation time. The output's frame count is checked
against the segments' before the temp file becomes OUTPUT.
"""
from __future__ import annotations

import heapq
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import av

from pipeline.artifacts.atomic import atomic_path
from pipeline.sr.runner.records import Record
from pipeline.sr.video import av_io as video_io
from pipeline.sr.video.av_io import COPIED, ReadEnd, VideoError
from pipeline.sr.video.clip import VideoPlan, finish


class JoinDiskError(OSError):
    """The output could not be written (a full disk, a read-only folder): the segments stay for a rerun."""


def _when(packet: av.Packet) -> float:
    t = packet.dts if packet.dts is not None else packet.pts
    return float(t * packet.time_base) if t is not None and packet.time_base else 0.0


def _video_packets(files: list[Path], results: list[dict], tb: Fraction) -> Iterator[tuple[float, int, av.Packet]]:
    """Every segment's packets in order with their encoder's timestamps; decode times kept strictly increasing."""
    last_dts = None
    for k, (f, r) in enumerate(zip(files, results, strict=True)):
        stamps = iter(r["packets"])
        with av.open(str(f), format=video_io.SEGMENT_MUXER) as c:
            for p in c.demux(c.streams.video[0]):
                if not p.size:
                    continue
                pts, dts, duration = next(stamps)
                if dts is None:
                    dts = pts
                if last_dts is not None and dts is not None and dts <= last_dts:
                    dts = last_dts + 1
                    if pts is not None and dts > pts:
                        raise VideoError(f"segment {k}'s decode times overlap the segment before it")
                p.time_base, p.pts, p.dts = tb, pts, dts
                if duration:
                    p.duration = duration
                last_dts = dts
                yield _when(p), 0, p


def _copied_packets(src: Path, drop: tuple[str, ...]) -> Iterator[tuple[float, int, video_io.Packet]]:
    with video_io.open_input(src) as c:
        wanted = [s for s in c.streams if s.type in COPIED and s.type not in drop]
        if wanted:
            for p in c.demux(wanted):
                if p.size:
                    yield _when(p), 1, video_io.Packet(p, p.stream.index)


def _video_count(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for p in c.demux(c.streams.video[0]) if p.size)


def _join(tmp: Path, job, vp: VideoPlan, files: list[Path], results: list[dict], frames: int) -> None:
    with av.open(str(files[0]), format=video_io.SEGMENT_MUXER) as first:
        joiner = video_io.Joiner(tmp, job.fmt, vp.info, job.src, vp.drop, first.streams.video[0])
    try:
        merged = heapq.merge(_video_packets(files, results, joiner.time_base), _copied_packets(job.src, vp.drop),
                             key=lambda t: (t[0], t[1]))
        for _, kind, p in merged:
            if kind == 0:
                joiner.video_packet(p)
            else:
                joiner.packet(p)
    except BaseException:
        joiner.abort()
        raise
    joiner.close()
    if (got := _video_count(tmp)) != frames:  # before the rename: a short output never takes OUTPUT's name
        raise VideoError(f"the joined output holds {got} frames, its segments {frames}")


def merge(rec: Record, results: list[dict]) -> tuple[ReadEnd, int]:
    """The segments' records folded into the clip's (sizes, times, notes once); the clip's reader end and frames."""
    errors: list[str] = []
    frames = 0
    for r in results:
        d = r["record"]
        if d.get("in_size") and not rec.in_size:
            rec.in_size, rec.out_size = tuple(d["in_size"]), tuple(d["out_size"])
            rec.mode, rec.bit_depth, rec.tiles = d["mode"], d["bit_depth"], d["tiles"]
            rec.max_shift = d.get("tile_grid_shift_lr_px", 0.0)
            rec.notes.extend(n for n in d.get("notes", []) if n not in rec.notes)
        rec.decode_s += d.get("decode_s", 0.0)
        rec.infer_s += d.get("infer_s", 0.0)
        rec.encode_s += d.get("encode_s", 0.0)
        for k, v in d.get("cpu_s", {}).items():
            rec.cpu_s[k] = rec.cpu_s.get(k, 0.0) + v
        if d.get("rerun_fp32"):  # frames' tiles re-run at fp32 (pipeline.sr.runner.finite)
            rec.rerun, rec.rerun_reason = rec.rerun + d["rerun_fp32"]["tiles"], d["rerun_fp32"]["reason"]
        errors.extend(r.get("errors", []))
        frames += len(r["timing"])
    return ReadEnd(errors, results[-1].get("end_s")), frames


def join(rec: Record, vp: VideoPlan, files: list[Path], results: list[dict], wall: float,
         reused_frames: int = 0) -> bool:
    """The clip's output from its finished segments (in order), written atomically; the outcome is rec's. Returns
    whether OUTPUT was written (a damaged source's frames that decoded count). JoinDiskError when the output could
    not be written (the caller keeps the segments and says so). `reused_frames`: those of segments a killed run
    made, which this run's frames/s leaves out."""
    failed = next((r["record"] for r in results if r["record"]["status"] == "failed"), None)
    if failed is not None:
        rec.fail(failed["reason"])
        return False
    end, frames = merge(rec, results)
    try:
        with atomic_path(rec.job.dst) as tmp:
            _join(tmp, rec.job, vp, files, results, frames)
    except OSError as e:
        raise JoinDiskError(e.errno, f"cannot write {rec.job.dst}: {e.strerror or e}") from None
    except (av.FFmpegError, VideoError) as e:
        rec.fail(f"joining the segments failed: {e if isinstance(e, VideoError) else video_io.reason(e)}")
        return False
    rec.notes.extend(n for n in vp.notes if n not in rec.notes)
    finish(rec, vp, frames, end, wall, reused=reused_frames)
    return True
