"""One clip cut into segments that executors run apart (Ray actors), then joined into one output by stream copy.

    plan     from the demuxed packets (no decoding): cuts at keyframes about --segment-seconds apart. A segment
             is (clip, first keyframe pts, end pts): its reader seeks to that keyframe, drops frames before it and
             stops before the next segment's first frame (video_io.Window), so every source frame lands in exactly
             one segment. A keyframe is a cut only when no packet before it (in decode order) is shown after it, so
             B-frames, open GOPs (the leading frames belong to the segment before: its decoder goes on past the cut
             until they are out) and VFR timing all split cleanly.
    files    each segment is a NUT file beside the output, named by what makes it (the source file, the model
             and the run's settings), with a JSON of its frames' timing written after it: a rerun with
             --skip-existing takes the segments a killed run finished.
    join     the driver copies the segments' packets into OUTPUT (no second encode) with the source's audio and
             subtitle packets, in time order, the local run's layout and tags; then removes the segment files.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from pipeline.artifacts.atomic import atomic_path, atomic_write
from pipeline.sr import video_io
from pipeline.sr.console import Console
from pipeline.sr.records import Record
from pipeline.sr.video import VideoPlan, VideoRunner, finish, plan_clips
from pipeline.sr.video import plan as plan_clip
from pipeline.sr.video_io import COPIED, ReadEnd, VideoError, Window

SEGMENTS_PER_ACTOR = 4   # the default length gives every actor several segments: a slow or killed one costs little
MIN_SEGMENT_S = 1.0      # shorter segments: the seek and the join cost more than they spread


@dataclass(frozen=True)
class Segment:
    index: int
    start: int | None    # its first keyframe's pts (None: the clip's start, nothing dropped before it)
    end: int | None      # the next segment's start (None: the clip's end)

    @property
    def window(self) -> Window:
        return Window(self.start, self.end)

    def to_json(self) -> dict:
        return {"index": self.index, "start": self.start, "end": self.end}

    @classmethod
    def from_json(cls, d: dict) -> Segment:
        return cls(int(d["index"]), d["start"], d["end"])


def default_seconds(duration_s: float | None, actors: int) -> float:
    """--segment-seconds when not given: several segments per actor, none shorter than MIN_SEGMENT_S."""
    if not duration_s:
        return math.inf
    return max(MIN_SEGMENT_S, duration_s / (max(1, actors) * SEGMENTS_PER_ACTOR))


def _cuts(path: Path) -> tuple[list[int], Fraction, int | None]:
    """The keyframes where the clip may be cut (pts, in decode order), the stream's time base and its last pts;
    no cut at all when a video packet has no pts (nothing to split by)."""
    cuts: list[int] = []
    shown = None  # the latest pts of any packet so far, in decode order
    with video_io.open_input(path) as container:
        video = container.streams.video[0]
        tb = Fraction(video.time_base)
        for packet in container.demux(video):
            if not packet.size:
                continue
            if packet.pts is None:
                return [], tb, None
            if packet.is_keyframe and (shown is None or packet.pts > shown):
                cuts.append(packet.pts)
            shown = packet.pts if shown is None else max(shown, packet.pts)
    return cuts, tb, shown


def plan(path: Path, seconds: float) -> list[Segment]:
    """The clip's segments, about `seconds` long each (a clip shorter than two stays one)."""
    try:
        cuts, tb, last = _cuts(path)
    except av.FFmpegError:  # damage: the clip runs whole, its reader reports what is lost
        return [Segment(0, None, None)]
    if not cuts or last is None or (last - cuts[0]) * tb < 2 * seconds:
        return [Segment(0, None, None)]
    starts: list[int] = []
    for pts in cuts[1:]:
        since = starts[-1] if starts else cuts[0]
        if (pts - since) * tb >= seconds and (last - pts) * tb >= seconds / 2:  # no tiny last segment either
            starts.append(pts)
    bounds = [None, *starts, None]
    return [Segment(i, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


# -- the segment files ----------------------------------------------------------------------------------------------

def clip_key(src: Path, settings: dict) -> str:
    """What a clip's segments are made of: the source file (size, modification time) and the run's settings."""
    st = src.stat()
    blob = json.dumps({"src": str(src.absolute()), "size": st.st_size, "mtime": st.st_mtime_ns, **settings},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def segment_path(dst: Path, key: str, index: int) -> Path:
    return dst.parent / f".{dst.name}.{key}.seg{index:04d}.{video_io.SEGMENT_MUXER}"


def result_path(segment_file: Path) -> Path:
    return segment_file.with_name(segment_file.name + ".json")


def save_result(segment_file: Path, result: dict) -> None:
    """Written after the segment file: both there means the segment is done (--skip-existing takes it)."""
    atomic_write(result_path(segment_file), json.dumps(result))


def load_result(segment_file: Path) -> dict | None:
    """A finished segment's result, or None (not made, or made by a run killed before its result was written)."""
    try:
        result = json.loads(result_path(segment_file).read_text())
    except (OSError, ValueError):
        return None
    return result if segment_file.is_file() and "timing" in result else None


def remove(segment_files: list[Path]) -> None:
    for f in segment_files:
        f.unlink(missing_ok=True)
        result_path(f).unlink(missing_ok=True)


# -- the join -------------------------------------------------------------------------------------------------------

def _when(packet: av.Packet) -> float:
    t = packet.dts if packet.dts is not None else packet.pts
    return float(t * packet.time_base) if t is not None and packet.time_base else 0.0


def _video_packets(files: list[Path], durations: dict[int, int]) -> Iterator[tuple[float, int, av.Packet]]:
    """Every segment's packets in order; a packet the segment container kept no duration for gets its frame's."""
    for f in files:
        with av.open(str(f), format=video_io.SEGMENT_MUXER) as c:
            for p in c.demux(c.streams.video[0]):
                if p.size:
                    if not p.duration and p.pts in durations:
                        p.duration = durations[p.pts]
                    yield _when(p), 0, p


def _copied_packets(src: Path, drop: tuple[str, ...]) -> Iterator[tuple[float, int, video_io.Packet]]:
    with video_io.open_input(src) as c:
        wanted = [s for s in c.streams if s.type in COPIED and s.type not in drop]
        if wanted:
            for p in c.demux(wanted):
                if p.size:
                    yield _when(p), 1, video_io.Packet(p, p.stream.index)


def _join(tmp: Path, job, vp: VideoPlan, files: list[Path], durations: dict[int, int]) -> None:
    with av.open(str(files[0]), format=video_io.SEGMENT_MUXER) as first:
        joiner = video_io.Joiner(tmp, job.fmt, vp.info, job.src, vp.drop, first.streams.video[0])
    try:
        merged = heapq.merge(_video_packets(files, durations), _copied_packets(job.src, vp.drop),
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


def merge(rec: Record, results: list[dict]) -> tuple[ReadEnd, int, dict[int, int]]:
    """The segments' records folded into the clip's (sizes, times, notes once); the clip's reader end, frames and
    each frame's duration by pts."""
    errors: list[str] = []
    durations: dict[int, int] = {}
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
        if d.get("rerun_fp32"):  # frames' tiles re-run at fp32 (pipeline.sr.finite)
            rec.rerun, rec.rerun_reason = rec.rerun + d["rerun_fp32"]["tiles"], d["rerun_fp32"]["reason"]
        errors.extend(r.get("errors", []))
        frames += len(r["timing"])
        durations.update({pts: dur for pts, dur in r["timing"] if pts is not None and dur})
    return ReadEnd(errors, results[-1].get("end_s")), frames, durations


def join(rec: Record, vp: VideoPlan, files: list[Path], results: list[dict], wall: float) -> None:
    """The clip's output from its finished segments (in order), written atomically; the outcome is rec's."""
    failed = next((r["record"] for r in results if r["record"]["status"] == "failed"), None)
    if failed is not None:
        rec.fail(failed["reason"])
        return
    end, frames, durations = merge(rec, results)
    try:
        with atomic_path(rec.job.dst) as tmp:
            _join(tmp, rec.job, vp, files, durations)
    except OSError as e:
        rec.fail(f"cannot write {rec.job.dst}: {e.strerror or e}")
        return
    except (av.FFmpegError, VideoError) as e:
        rec.fail(f"joining the segments failed: {video_io.reason(e)}")
        return
    rec.notes.extend(n for n in vp.notes if n not in rec.notes)
    finish(rec, vp, frames, end, wall)


# -- what executors use ---------------------------------------------------------------------------------------------

@dataclass
class ClipWork:
    """One clip of a segmented run: its record and plan, its segments and their files, the results in so far."""

    rec: Record
    plan: VideoPlan
    segments: list[Segment]
    files: list[Path]
    results: dict[int, dict]
    reused: int = 0
    join_s: float = 0.0

    def todo(self) -> list[tuple[Segment, Path]]:
        return [(s, f) for s, f in zip(self.segments, self.files, strict=True) if s.index not in self.results]

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.segments)

    def finish(self, wall: float) -> None:
        """Join the segments into the clip's output (its record says how that went) and remove their files."""
        t0 = time.perf_counter()
        join(self.rec, self.plan, self.files, [self.results[s.index] for s in self.segments], wall)
        remove(self.files)
        self.join_s = time.perf_counter() - t0

    def fact(self) -> dict:
        """The summary's line for this clip: its segments, those a killed run made, and what the split cost: the
        segments' seeks (opening the file to the first frame kept, summed over the actors) and the join."""
        seek = sum(r.get("seek_s", 0.0) for r in self.results.values())
        return {"input": self.rec.job.rel, "segments": len(self.segments), "reused": self.reused,
                "seek_s": round(seek, 3), "join_s": round(self.join_s, 3)}


def plan_work(records: list[Record], scale: float, settings: dict, seconds: float | None, actors: int,
              resume: bool, plans: dict[str, VideoPlan] | None = None) -> list[ClipWork]:
    """Each clip's plan (`plans`: made already by video.plan_clips; a file that is no usable video fails its record
    there, as in a local run) and segments; with `resume` (--skip-existing) the segments a killed run finished are
    taken as they are. `settings`: what else makes a segment (model, backend, precision, codec, crf, audio, tiles),
    so none of another run is taken."""
    if plans is None:
        plans = plan_clips(records, scale, settings.get("codec"), settings.get("crf"), settings.get("audio", "copy"))
    work = []
    for rec in records:
        if rec.status == "failed":
            continue
        vp = plans[rec.job.rel]
        segs = plan(rec.job.src, seconds or default_seconds(vp.info.duration_s, actors))
        key = clip_key(rec.job.src, {**settings, "scale": scale, "segments": [s.to_json() for s in segs]})
        files = [segment_path(rec.job.dst, key, s.index) for s in segs]
        done = {s.index: r for s, f in zip(segs, files, strict=True) if resume and (r := load_result(f))}
        work.append(ClipWork(rec, vp, segs, files, done, len(done)))
    return work


def run_segment(worker, job, task: dict) -> dict:
    """An executor's unit for one segment (a Ray actor's): the clip planned as the driver planned it, the
    segment upscaled into its file and its result saved beside it; failures are the result's record."""
    seg, path, rec = Segment.from_json(task["segment"]), Path(task["file"]), Record(job)
    try:
        vp = plan_clip(job, worker.scale, task.get("codec"), task.get("crf"), task.get("audio", "copy"))
    except VideoError as e:
        rec.fail(str(e))
        return {"index": seg.index, "record": rec.as_dict()}
    runner = VideoRunner(worker, Console(False, lambda m: None, False))
    result = runner.segment(rec, vp, seg.window, path)
    if "timing" in result:
        save_result(path, result)
    return {"index": seg.index, **result}
