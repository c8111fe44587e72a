"""One clip cut into segments that an executor runs apart (Ray actors; the local run one after another), then joined
into one output by stream copy (pipeline.sr.video.join).

    plan     from the demuxed packets (no decoding): cuts at keyframes about --segment-seconds apart. A segment
             is (clip, first keyframe pts, end pts): its reader seeks to that keyframe, drops frames before it and
             stops before the next segment's first frame (video_io.Window), so every source frame lands in exactly
             one segment. A keyframe is a cut only when no packet before it (in decode order) is shown after it, so
             B-frames, open GOPs (the leading frames belong to the segment before: its decoder goes on past the cut
             until they are out) and VFR timing all split cleanly.
    files    each segment is a NUT file beside the output, named by the plan and its key, with a record written
             after it (pipeline.sr.video.segment_files): a rerun with --skip-existing takes the segments a killed run
             finished once each is verified, and redoes the others.
    lock     a run holds its clips' outputs locked (pipeline.artifacts.lock) from the plan to the join: a second run
             on the same output fails that clip at once with one line, and touches none of the first run's files.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av

from pipeline.artifacts.lock import Busy, OutputLock
from pipeline.sr.runner.console import Console
from pipeline.sr.runner.records import Record
from pipeline.sr.video import av_io as video_io
from pipeline.sr.video.av_io import VideoError, Window
from pipeline.sr.video.clip import VideoPlan, VideoRunner
from pipeline.sr.video.clip import plan as plan_clip
from pipeline.sr.video.join import JoinDiskError, join
from pipeline.sr.video.segment_files import load, remove, save, segment_key, segment_path

SEGMENT_S = 60.0         # the default length: a killed run loses about a minute of work; a clip under two stays whole
SEGMENTS_PER_ACTOR = 4   # with several actors, each gets several segments: a slow or killed one costs little
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
    """--segment-seconds when not given: about a minute, and several segments per actor when there are several
    (none shorter than MIN_SEGMENT_S)."""
    if not duration_s or actors <= 1:
        return SEGMENT_S
    return max(MIN_SEGMENT_S, min(SEGMENT_S, duration_s / (actors * SEGMENTS_PER_ACTOR)))


def _cuts(path: Path) -> tuple[list[int], Fraction, int | None]:
    """The keyframes where the clip may be cut (pts, in decode order), the stream's time base and its last pts;
    no cut at all when a video packet has no pts (nothing to split by). A repeated pts is shifted by the reader
    (video_io._Shown) up to one tick per repeat: a keyframe is a cut only past where such shifts can reach."""
    cuts: list[int] = []
    shown = None  # the latest pts of any packet so far, in decode order
    seen: set[int] = set()  # the pts since the last cut, to count the repeats among them
    repeats = 0
    with video_io.open_input(path) as container:
        video = container.streams.video[0]
        tb = Fraction(video.time_base)
        for packet in container.demux(video):
            if not packet.size:
                continue
            if packet.pts is None:
                return [], tb, None
            if packet.is_keyframe and (shown is None or packet.pts > shown + repeats):
                cuts.append(packet.pts)
                seen.clear()
                repeats = 0
            repeats += packet.pts in seen
            seen.add(packet.pts)
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


# -- what executors use ---------------------------------------------------------------------------------------------

@dataclass
class ClipWork:
    """One clip of a segmented run: its record and plan, its segments and their files, the results in so far, the
    lock that makes this run its output's one writer, and why segments a killed run left are redone."""

    rec: Record
    plan: VideoPlan
    segments: list[Segment]
    files: list[Path]
    results: dict[int, dict]
    key: str = ""
    lock: OutputLock | None = None
    redone: list[str] = field(default_factory=list)
    reused: int = 0
    reused_frames: int = 0  # the frames of the segments a killed run made: this run did not upscale them
    join_s: float = 0.0
    cut_s: float = 0.0  # the plan's pass over the packets (the cuts) and the reused segments' verification

    def todo(self) -> list[tuple[Segment, Path]]:
        return [(s, f) for s, f in zip(self.segments, self.files, strict=True) if s.index not in self.results]

    @property
    def done(self) -> bool:
        return len(self.results) == len(self.segments)

    def finish(self, wall: float) -> None:
        """Join the segments into the clip's output (its record says how that went) and remove their files once
        it is written; a clip not written (a failed segment or join, a full disk) keeps them for a rerun with
        --skip-existing. The output's lock goes."""
        t0 = time.perf_counter()
        try:
            if join(self.rec, self.plan, self.files, [self.results[s.index] for s in self.segments], wall,
                    reused_frames=self.reused_frames):
                remove(self.files)
        except JoinDiskError as e:
            self.rec.fail(f"{e.strerror}; its {len(self.files)} finished segment(s) are kept beside it: free space "
                          f"and rerun with --skip-existing to join them without upscaling again")
        finally:
            self.release()
        self.join_s = time.perf_counter() - t0

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def fact(self) -> dict:
        """The summary's line for this clip: its segments, those a killed run made (reused, redone), those finished
        and kept for a rerun while the clip is not written (kept), and what the
        split cost: the cut (the plan's pass over the packets, and verifying reused segments), the segments' seeks
        (opening the file to the first frame kept) and records (each file demuxed and hashed), both summed over
        the actors, and the join."""
        seek = sum(r.get("seek_s", 0.0) for r in self.results.values())
        record = sum(r.get("record_s", 0.0) for r in self.results.values())
        return {"input": self.rec.job.rel, "segments": len(self.segments), "reused": self.reused,
                "redone": len(self.redone), "kept": 0 if self.rec.status == "ok" else len(self.results),
                "cut_s": round(self.cut_s, 3), "seek_s": round(seek, 3), "record_s": round(record, 3),
                "join_s": round(self.join_s, 3)}


def _finished(files: list[Path], segs: list[Segment], key: str) -> tuple[dict[int, dict], list[str]]:
    """The segments a killed run finished that pass every check, and a line for each one that does not."""
    done, redone = {}, []
    for s, f in zip(segs, files, strict=True):
        result, why = load(f, key)
        if result is not None:
            done[s.index] = result
        elif why is not None:
            redone.append(f"segment {s.index} ({f.name}) is redone: {why}")
    return done, redone


def lock_outputs(records: list[Record]) -> dict[str, OutputLock]:
    """Each clip's output locked for this run, by name, before any work; a clip whose output another run holds
    fails here with one line (that run's files are left alone)."""
    locks = {}
    for rec in records:
        if rec.status == "failed":
            continue
        try:
            locks[rec.job.rel] = OutputLock(rec.job.dst).acquire()
        except Busy as e:
            rec.fail(str(e))
        except OSError as e:
            rec.fail(f"cannot lock {rec.job.dst}: {e.strerror or e}")
    return locks


def plan_work(records: list[Record], scale: float, identity: dict, seconds: float | None, actors: int,
              resume: bool, plans: dict[str, VideoPlan], locks: dict[str, OutputLock]) -> list[ClipWork]:
    """Each locked clip's segments (`plans`: made already by video.plan_clips; a file that is no usable video
    failed its record there, as in a local run); with `resume` (--skip-existing) the segments a killed run
    finished are taken once verified. `identity`: what else makes a segment's bytes (segment_identity), so none
    of another run is taken."""
    work = []
    for rec in records:
        if rec.status == "failed" or (lock := locks.get(rec.job.rel)) is None:
            continue
        t0 = time.perf_counter()
        vp = plans[rec.job.rel]
        segs = plan(rec.job.src, seconds or default_seconds(vp.info.duration_s, actors))
        key = segment_key(rec.job.src, {**identity, "scale": scale, "segments": [s.to_json() for s in segs]})
        files = [segment_path(rec.job.dst, key, s.index) for s in segs]
        done, redone = _finished(files, segs, key) if resume else ({}, [])
        work.append(ClipWork(rec, vp, segs, files, done, key, lock, redone, len(done),
                             sum(len(r["timing"]) for r in done.values()), cut_s=time.perf_counter() - t0))
    return work


def resume_lines(works: list[ClipWork]) -> list[str]:
    """What a --skip-existing run says of the segments a killed run left: how many it takes, which it redoes."""
    reused = sum(w.reused for w in works)
    lines = [f"taking {reused} segment(s) a killed earlier run finished, each verified (--skip-existing)"] \
        if reused else []
    return lines + [f"{w.rec.job.rel}: {line}" for w in works for line in w.redone]


def segment_identity(spec, weights, choice: dict, opts: dict) -> dict:
    """What makes a clip's segment bytes besides the source and the plan, decided here once for every executor:
    the backend Choice's key (`choice`: backend, precision, model, scale and the SHA-256 of every file it runs), the
    registered weights' SHA-256 (a torch run's files are its weights) and the run's video and tiling options
    (`opts`: codec, crf, preset, audio, tile, tile_overlap, batch, and the encoder's threads, which change x264's
    bytes). segment_files.segment_key adds the encoder's own options and default presets."""
    hashes = []
    with contextlib.suppress(Exception):  # an engine or ONNX run without the weights file: its files say it
        hashes.append(spec.weights_sha256(weights))
    keys = ("codec", "crf", "preset", "audio", "tile", "tile_overlap", "batch", "encoder_threads")
    return {**choice, "weights": hashes, **{k: opts.get(k) for k in keys}}


def run_segment(worker, job, task: dict, bar=None) -> dict:
    """An executor's unit for one segment (a Ray actor's): the clip planned as the driver planned it, the
    segment upscaled into its file and its record saved beside it; failures are the result's record."""
    seg, path, rec = Segment.from_json(task["segment"]), Path(task["file"]), Record(job)
    try:
        vp = plan_clip(job, worker.scale, task.get("codec"), task.get("crf"), task.get("audio", "copy"),
                       task.get("preset"))
    except VideoError as e:
        rec.fail(str(e))
        return {"index": seg.index, "record": rec.as_dict()}
    runner = VideoRunner(worker, Console(False, lambda m: None, False),
                         encoder_threads=task.get("encoder_threads", 0))
    return {"index": seg.index, **encode_segment(runner, rec, vp, seg, path, task["key"], bar)}


def encode_segment(runner: VideoRunner, rec: Record, vp: VideoPlan, seg: Segment, path: Path, key: str,
                   bar=None) -> dict:
    """One segment into its file, its record saved beside it; a failure is the result's record (no record)."""
    result = runner.segment(rec, vp, seg.window, path, bar=bar)
    if "timing" in result:
        t0 = time.perf_counter()
        try:
            save(path, key, {**result, "record_s": 0.0})
        except (OSError, VideoError) as e:
            rec.fail(str(e) if isinstance(e, VideoError) else f"cannot write {path}: {e.strerror or e}")
            return {"record": rec.as_dict()}
        result["record_s"] = round(time.perf_counter() - t0, 4)  # its proof: the file demuxed and hashed
    return result


def run_clip(runner: VideoRunner, work: ClipWork, console: Console) -> None:
    """A clip's segments in this process, one after another (those a killed run finished are taken), then joined;
    the bar moves per frame over the whole clip. A failed segment fails the clip (the ones done stay)."""
    t0 = time.perf_counter()
    rec, vp = work.rec, work.plan
    runner.say(rec, vp)
    done = sum(len(r["timing"]) for r in work.results.values())
    bar = console.bar(vp.info.frames, unit="frame", desc=rec.job.rel)
    bar.update(done)
    try:
        for seg, f in work.todo():
            result = encode_segment(runner, Record(rec.job), vp, seg, f, work.key, bar=bar)
            if "timing" not in result:
                rec.fail(result["record"]["reason"])
                work.release()
                return
            work.results[seg.index] = result
    finally:
        bar.close()
    work.finish(time.perf_counter() - t0)
