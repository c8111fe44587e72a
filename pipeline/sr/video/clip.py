"""One video through the sr stage: frames are read (one thread), upscaled by the run's ImageWorker (this thread;
whole frames batched up to --batch, large ones tiled, exactly as images are; on a device a frame is submitted before
the one before it is collected), converted to the encoder's YUV (a third thread) and encoded with the copied audio
and subtitle packets (a fourth) into a temporary file renamed at the end.

The queues between the threads hold a few frames, so memory does not grow with the clip's length. A damaged or
truncated clip still gets the frames that decode; its record fails with one line saying what was lost.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from pipeline.artifacts.atomic import atomic_path
from pipeline.backends.pixels import NonFiniteOutput
from pipeline.errors import PipelineError
from pipeline.images import tiling
from pipeline.images.imageio import Image
from pipeline.sr.runner.console import Console
from pipeline.sr.runner.jobs import Job
from pipeline.sr.runner.records import Record
from pipeline.sr.runner.worker import ImageWorker, Planned, infer_reason
from pipeline.sr.video import av_io as video_io
from pipeline.sr.video.av_io import WHOLE, Frame, Packet, ReadEnd, VideoError, VideoInfo, Window
from pipeline.sr.video.cpu_split import DECODE, ENCODE, CpuMeter, name_thread
from pipeline.sr.videofmt import codec_for, crf_for, preset_for, size_problem, video_format

QUEUE_FRAMES = 2  # frames waiting for inference beyond one batch


@dataclass
class VideoPlan:
    """What one clip becomes: codec, pixel format and size (cropped by at most 1 px where chroma needs it)."""

    info: VideoInfo
    codec: str
    crf: int | None
    pix_fmt: str
    width: int
    height: int
    notes: list[str]
    drop: tuple[str, ...] = ()   # stream types left out (--audio drop)
    unheld: list[str] = field(default_factory=list)  # copied streams the output container cannot hold
    notes_said: bool = False  # already in the run's first line (a single clip): not repeated
    preset: str | None = None  # x264/x265's (videofmt.preset_for), None for other codecs

    def describe(self, scale: float) -> str:
        i = self.info
        rate = f"{float(i.rate):.3f}".rstrip("0").rstrip(".") if i.rate else "?"
        frames = f"{i.frames} frames" if i.frames else "frames unknown"
        quality = "lossless" if self.crf is None else f"crf {self.crf}"
        quality += f" {self.preset}" if self.preset else ""
        kept = [c.replace(":", " ") for c in i.copied if c.split(":")[0] not in self.drop]
        copied = f"; {' and '.join(kept)} copied" if kept else ""
        return (f"{i.width}x{i.height} {i.pix_fmt} {rate} fps, {frames} -> {self.width}x{self.height} "
                f"{self.codec} {self.pix_fmt} {quality} (x{scale:g}; {i.colour.describe()}{copied})")


def plan(job: Job, scale: float, codec: str | None, crf: int | None, audio: str = "copy",
         preset: str | None = None) -> VideoPlan:
    """Probe the clip and decide its output; raises VideoError for a file that is no usable video."""
    info = video_io.probe(job.src)
    drop = ("audio",) if audio == "drop" else ()
    kept = [c for c in info.copied if c.split(":")[0] not in drop]
    unheld = [c for c in kept if not video_io.container_holds(job.fmt, c.split(":", 1)[1])]
    chosen = codec_for(job.fmt, codec)
    pix_fmt, notes = video_io.output_pix_fmt(chosen, info)
    up_w, up_h = tiling.output_length(info.width, scale), tiling.output_length(info.height, scale)
    w, h = video_io.even_size(up_w, up_h, pix_fmt)
    if (w, h) != (up_w, up_h):
        notes.append(f"output {up_w}x{up_h} cropped to {w}x{h} (the last odd row/column: {pix_fmt} needs even sides)")
    if info.rotation:
        notes.append(f"rotation {info.rotation} deg kept as display metadata")
    if info.dropped:
        notes.append(f"not copied: {_tally(info.dropped)}")
    if len(kept) < len(info.copied):
        notes.append(f"audio dropped (--audio drop): {', '.join(c for c in info.copied if c not in kept)}")
    return VideoPlan(info, chosen, crf_for(chosen, crf), pix_fmt, w, h, notes, drop, unheld,
                     preset=preset_for(chosen, preset))


def _tally(streams: list[str], shown: int = 4) -> str:
    """'attachment:ttf x500, data:bin_data' for a list of stream kinds: a line's worth, whatever their number."""
    counts = Counter(streams)
    parts = [f"{k} x{n}" if n > 1 else k for k, n in counts.most_common(shown)]
    more = len(counts) - shown
    return ", ".join(parts) + (f" and {more} more kinds" if more > 0 else "")


def plan_clips(records: list[Record], scale: float, codec: str | None, crf: int | None,
               audio: str = "copy", preset: str | None = None) -> dict[str, VideoPlan]:
    """Each clip's plan by its name; a file that is no usable video fails here (its record) with one line. An
    output the encoder cannot take (its size limits), or a stream the output container cannot hold, is an argument
    problem: PipelineError before any work (the output name and options are the user's choice)."""
    plans = {}
    for rec in records:
        try:
            plans[rec.job.rel] = vp = plan(rec.job, scale, codec, crf, audio, preset)
        except VideoError as e:
            rec.fail(str(e))
            continue
        if problem := size_problem(vp.codec, vp.width, vp.height):
            raise PipelineError(f"{rec.job.rel}: the output would be {vp.width}x{vp.height} but {problem}; "
                                f"choose another --codec or --scale (nothing was written)")
        if vp.unheld:
            audio_hint = "; --audio drop leaves the audio out" if any(c.startswith("audio:") for c in vp.unheld) else ""
            raise PipelineError(f"{rec.job.rel}: {' and '.join(c.replace(':', ' ') for c in vp.unheld)} cannot be "
                                f"copied into .{rec.job.fmt} (write .mkv, which holds it{audio_hint})")
    return plans


def _short(info: VideoInfo, frames: int, end: ReadEnd) -> bool:
    """Whether the frames stopped before the clip's end: by the header's count, else by time (VFR-safe)."""
    if info.frames_exact:
        return frames < info.frames
    if info.duration_s and end.end_s is not None:
        slack = 2 / float(info.rate) if info.rate else 0.1  # the last frame's duration is not always stored
        return end.end_s < info.duration_s - slack
    return False


def _rate(r: Fraction | None) -> float | None:
    return round(float(r), 4) if r else None


class _Stop(Exception):
    """The consumer of a queue is gone; its producer stops."""


# A frame upscaled elsewhere (a served model): BGR(A) pixels in -> (the output buffer, the server's info)
Remote = Callable[[np.ndarray], tuple[np.ndarray, dict]]


class _InFlight:
    """A clip's frames between the reader and the writer on the thread that drives inference: whole frames are
    submitted and collected one batch later (a device works on one batch while this thread plans and submits the
    next); tiled frames run tile batch by tile batch. Copied packets follow the frames read before them."""

    def __init__(self, runner: VideoRunner, rec: Record, outq: queue.Queue, bar, counted: bool):
        self.runner, self.worker, self.rec, self.outq, self.bar = runner, runner.worker, rec, outq, bar
        self.counted = counted  # frames are the clip's from its first, so a failure can give the frame's number
        self.batches: deque[tuple[list[tuple[Planned, Frame]], Callable[[], None], list[Packet]]] = deque()
        self.done = 0
        # batches left in flight after a submission: one on a device (it works while this thread plans the next);
        # none beside a host backend, whose submission computed it already (holding it would only hold memory)
        self.ahead = 0 if self.worker.backend.host_cores else self.worker.in_flight - 1

    def packet(self, item: Packet) -> None:
        if self.batches:
            self.batches[-1][2].append(item)
        else:
            self.outq.put(item)

    def submit(self, frames: list[tuple[Planned, Frame]]) -> None:
        if not frames:
            return
        if not all(self.worker.batchable(p) for p, _ in frames):
            self.collect(0)
            self.runner._upscale(self.rec, frames, self.outq, self._first())
            self._counted(len(frames))
            return
        t = time.perf_counter()
        finish = self.worker.submit_batch([p for p, _ in frames])
        self.rec.infer_s += time.perf_counter() - t
        self.batches.append((frames, finish, []))
        self.collect(self.ahead)

    def collect(self, keep: int) -> None:
        """Collect the oldest batches until `keep` are left; their frames (then their packets) go to the writer."""
        while len(self.batches) > keep:
            frames, finish, packets = self.batches.popleft()
            t = time.perf_counter()
            try:
                finish()
            except (NonFiniteOutput, PipelineError) as e:
                raise _failed_frame(frames, self._first(), e) from None
            self.rec.infer_s += time.perf_counter() - t
            if any(p.failure for p, _ in frames):  # a frame whose output could not be made finite: the clip fails
                raise _failed_frame(frames, self._first())
            for p, f in frames:
                p.assemble()
                if p.rerun:  # frames whose output was not finite, re-run at fp32 (pipeline.sr.runner.finite)
                    self.rec.rerun, self.rec.rerun_reason = self.rec.rerun + p.rerun, p.rerun_reason
                self.outq.put((p.out, f.pts, f.duration))
            for item in packets:
                self.outq.put(item)
            self._counted(len(frames))

    def _first(self) -> int | None:
        """The clip's number of the next frame to come out (None in a segment, where it is not known)."""
        return self.done + 1 if self.counted else None

    def _counted(self, n: int) -> None:
        self.done += n
        self.bar.update(n)  # the bar shows its own frame rate


class VideoRunner:
    """Runs clips one after another through one ImageWorker, or through `remote` with `inflight` frames at a time
    (answers taken in order); exceptions of the `fatal` types end the run instead of failing one clip.
    `encoder_threads`: the encoder's threads (0: FFmpeg's choice), the run's share of the cores beside inference."""

    def __init__(self, worker: ImageWorker | None, console: Console, *, scale: float | None = None,
                 remote: Remote | None = None, inflight: int = 1, fatal: tuple[type[BaseException], ...] = (),
                 encoder_threads: int = 0):
        self.worker = worker
        self.console = console
        self.scale = worker.scale if worker is not None else scale
        self.depth = worker.batch if worker is not None else inflight  # frames one step takes
        self.remote, self.inflight, self.fatal = remote, inflight, fatal
        self.encoder_threads = encoder_threads

    # -- the reader and writer threads ------------------------------------------------------------------------

    @staticmethod
    def _put(q: queue.Queue, item, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stop

    def _reader(self, rec: Record, items, q: queue.Queue, stop: threading.Event, meter: CpuMeter) -> None:
        name_thread(DECODE)  # the decoder's threads, started from here, count as decoding
        try:
            t = time.perf_counter()
            for item in items:
                rec.decode_s += time.perf_counter() - t
                self._put(q, item, stop)
                t = time.perf_counter()
        except _Stop:
            pass
        except Exception as e:  # a reader crash ends the frames like a truncated file
            self._put_quiet(q, ReadEnd([video_io.reason(e)]), stop)
        finally:
            meter.sample()  # before the decoder's threads end with the file
            items.close()

    def _put_quiet(self, q: queue.Queue, item, stop: threading.Event) -> None:
        with contextlib.suppress(_Stop):
            self._put(q, item, stop)

    @staticmethod
    def _writer(rec: Record, writer: video_io.Writer, q: queue.Queue, failed: list[BaseException],
                timing: list[tuple[int | None, int | None]], meter: CpuMeter) -> None:
        """Encode until the None sentinel, then flush the encoder; after a failure keep taking items so the
        producer never blocks. `timing` gets each frame's (pts, duration) as it is written."""
        name_thread(ENCODE)  # the encoder's threads start from here (its first frame): they count as encoding
        while (item := q.get()) is not None:
            if failed:
                continue
            t = time.perf_counter()
            try:
                if isinstance(item, Packet):
                    writer.packet(item)
                else:
                    writer.frame(*item)
                    timing.append(item[1:])
            except OSError as e:  # the disk: this clip fails
                failed.append(e)
            except Exception as e:  # the encoder or the muxer: this clip fails
                failed.append(VideoError(f"encoding failed: {video_io.reason(e)}"))
            rec.encode_s += time.perf_counter() - t
        t = time.perf_counter()
        try:
            if not failed:
                writer.flush()
        except Exception as e:
            failed.append(VideoError(f"encoding failed: {video_io.reason(e)}"))
        rec.encode_s += time.perf_counter() - t
        meter.sample()  # before the encoder's threads end with the file

    @staticmethod
    def _converter(rec: Record, writer: video_io.Writer, q: queue.Queue, out: queue.Queue,
                   failed: list[BaseException]) -> None:
        """The frames' RGB -> YUV conversion (Writer.picture), a stage of its own between inference and the encoder:
        frame i+1 is converted while frame i encodes. Packets and the None sentinel pass on; after a failure items
        pass unconverted (the writer drops them) so no producer blocks. Its busy time is the encoder's."""
        name_thread(ENCODE)  # its CPU is the encoder's too, in the done line's split
        busy = 0.0
        while (item := q.get()) is not None:
            if isinstance(item, tuple) and not failed:
                t = time.perf_counter()
                try:
                    item = (writer.picture(item[0]), *item[1:])
                except Exception as e:  # the converter: this clip fails
                    failed.append(VideoError(f"encoding failed: {video_io.reason(e)}"))
                busy += time.perf_counter() - t
            out.put(item)
        rec.encode_s += busy  # before the sentinel: the writer adds its own after it
        out.put(None)

    # -- inference ------------------------------------------------------------------------------------------------

    def _upscale(self, rec: Record, frames: list[tuple[Planned, Frame]], out: queue.Queue, first: int | None) -> None:
        """Upscale a batch of frames; `first`: the clip's number of its first frame (None: not known, a segment)."""
        items = [p for p, _ in frames]
        t = time.perf_counter()
        try:
            if len(items) > 1:
                self.worker.infer_batch(items)
            else:
                self.worker.infer_tiled(items[0])
        except (NonFiniteOutput, PipelineError) as e:
            raise _failed_frame(frames, first, e) from None
        rec.infer_s += time.perf_counter() - t
        for p, f in frames:
            if p.rerun:  # frames whose output was not finite, re-run at fp32 (pipeline.sr.runner.finite)
                rec.rerun, rec.rerun_reason = rec.rerun + p.rerun, p.rerun_reason
            out.put((p.out, f.pts, f.duration))

    def _plan_frame(self, rec: Record, pixels) -> Planned:
        item = self.worker.plan(Image(pixels), rec.job.fmt)
        if not rec.in_size:  # every frame has the first frame's size and plan
            rec.in_size, rec.mode, rec.tiles = item.in_size, item.image.mode, item.plan.count
            rec.max_shift = item.plan.max_shift
            rec.notes.extend(item.notes)
        return item

    def _frames(self, rec: Record, inq: queue.Queue, outq: queue.Queue, failed: list, bar,
                counted: bool = True) -> tuple[ReadEnd, int]:
        """Take the reader's items until its ReadEnd: packets pass to the writer, frames are upscaled in batches.
        Returns the ReadEnd and the frames upscaled. `counted`: frames are the clip's from its first (not a
        segment's), so a failure can give the frame's number."""
        flight = _InFlight(self, rec, outq, bar, counted)
        pending: list[tuple[Planned, Frame]] = []
        while True:
            item = inq.get()
            if isinstance(item, ReadEnd):
                if item.refused:  # the clip fails whole: its partial output is not kept
                    raise VideoError(item.refused)
                flight.submit(pending)
                flight.collect(0)
                return item, flight.done
            if failed:  # the writer failed: stop early, the clip is lost anyway
                return ReadEnd([]), flight.done
            if isinstance(item, Packet):
                flight.packet(item)
                continue
            planned = self._plan_frame(rec, item.pixels)
            pending.append((planned, item))
            if not self.worker.batchable(planned) or len(pending) >= self.worker.batch:
                flight.submit(pending)
                pending = []

    def _remote_frames(self, rec: Record, inq: queue.Queue, outq: queue.Queue, failed: list,
                       bar) -> tuple[ReadEnd, int]:
        """_frames with the frames upscaled by `remote`, `inflight` at a time; answers go on in the frames' order."""
        pending: deque = deque()
        done = 0

        def ask(pixels):
            t = time.perf_counter()
            out, info = self.remote(pixels)
            return out, info, time.perf_counter() - t

        def drain(keep: int) -> None:
            nonlocal done
            while len(pending) > keep:
                fut, f = pending.popleft()
                out, info, seconds = fut.result()
                rec.infer_s += seconds
                if info.get("rerun_fp32"):
                    rec.rerun += info["rerun_fp32"]["tiles"]
                    rec.rerun_reason = info["rerun_fp32"]["reason"]
                if not rec.in_size:  # every frame has the first frame's size and plan
                    rec.in_size, rec.mode, rec.tiles = tuple(info["in_size"]), info["mode"], info["tiles"]
                    rec.notes.extend(info.get("notes", []))
                outq.put((out, f.pts, f.duration))
                done += 1
                bar.update(1)

        with ThreadPoolExecutor(self.inflight, thread_name_prefix="sr-video-remote") as pool:
            try:
                while True:
                    item = inq.get()
                    if isinstance(item, ReadEnd):
                        if item.refused:
                            raise VideoError(item.refused)
                        drain(0)
                        return item, done
                    if failed:
                        return ReadEnd([]), done
                    if isinstance(item, Packet):
                        outq.put(item)
                        continue
                    pending.append((pool.submit(ask, item.pixels), item))
                    drain(self.inflight - 1)
            finally:
                for fut, _ in pending:
                    fut.cancel()

    # -- one clip ---------------------------------------------------------------------------------------------------

    def _encode(self, rec: Record, vp: VideoPlan, tmp, window: Window = WHOLE, segment: bool = False,
                bar=None) -> tuple[ReadEnd, int, list, list]:
        """The clip (or its `window`, into a segment file) read, upscaled and written: (the reader's end, the
        frames written, their (pts, duration), the encoded packets' (pts, dts, duration) in a segment). `bar`: the
        clip's progress bar (a segment's frames move the whole clip's), else one of its own."""
        writer = video_io.Writer(tmp, rec.job.fmt, vp.codec, vp.crf, vp.info, vp.width, vp.height, vp.pix_fmt,
                                 rec.job.src, vp.drop, segment=segment, preset=vp.preset,
                                 threads=self.encoder_threads)
        stop = threading.Event()
        inq: queue.Queue = queue.Queue(maxsize=self.depth + QUEUE_FRAMES)
        # upscaled frames waiting for the converter, then one converted frame waiting for the encoder: as many
        # outputs held as before the conversion was a stage of its own
        outq: queue.Queue = queue.Queue(maxsize=self.depth)
        encq: queue.Queue = queue.Queue(maxsize=1)
        failed: list[BaseException] = []
        timing: list = []
        items = video_io.read(rec.job.src, vp.info, window, copy=not segment)
        meter = CpuMeter()
        reader = threading.Thread(target=self._reader, args=(rec, items, inq, stop, meter), name="sr-video-read")
        converter = threading.Thread(target=self._converter, args=(rec, writer, outq, encq, failed),
                                     name="sr-video-convert")
        encoder = threading.Thread(target=self._writer, args=(rec, writer, encq, failed, timing, meter),
                                   name="sr-video-encode")
        own_bar = bar is None
        bar = self.console.bar(vp.info.frames, unit="frame", desc=rec.job.rel) if own_bar else bar
        reader.start()
        converter.start()
        encoder.start()
        try:
            try:
                if self.remote is not None:
                    result = self._remote_frames(rec, inq, outq, failed, bar)
                else:
                    result = self._frames(rec, inq, outq, failed, bar, counted=window == WHOLE)
            finally:
                stop.set()
                outq.put(None)
                converter.join()
                encoder.join()
                reader.join()
                if own_bar:
                    bar.close()
            if failed:
                raise failed[0]
        except BaseException:
            writer.abort()
            raise
        writer.close()
        for k, v in (meter.stages() or {}).items():
            rec.cpu_s[k] = rec.cpu_s.get(k, 0.0) + v
        return (*result, timing, writer.packets)

    def run_all(self, records: list[Record], plans: dict[str, VideoPlan]) -> float:
        """Every clip in turn (those that failed planning are only reported); returns the seconds taken."""
        t0 = time.perf_counter()
        for rec in records:
            if rec.status != "failed":
                self.run(rec, plans[rec.job.rel])
            if rec.status == "failed":
                self.console.failed(rec)
        return time.perf_counter() - t0

    def say(self, rec: Record, vp: VideoPlan) -> None:
        rec.out_size, rec.bit_depth = (vp.width, vp.height), vp.info.depth
        self.console.info(f"{rec.job.rel}: {vp.describe(self.scale)}")
        for n in [] if vp.notes_said else vp.notes:
            self.console.info(f"{rec.job.rel}: {n}")
        rec.notes.extend(vp.notes)

    def _attempt(self, rec: Record, dst, work: Callable) -> bool:
        """work(tmp) into `dst` atomically; False (and rec failed with one line) when it failed."""
        try:
            with atomic_path(dst) as tmp:
                work(tmp)
        except self.fatal:
            raise
        except VideoError as e:
            rec.fail(str(e))
        except OSError as e:
            rec.fail(f"cannot write {dst}: {e.strerror or e}")
        except Exception as e:  # inference failure: this clip fails, the run goes on
            rec.fail(infer_reason(e))
        return rec.status != "failed"

    def run(self, rec: Record, vp: VideoPlan) -> None:
        """Upscale one planned clip into rec.job.dst; the outcome is rec's status and reason."""
        t0 = time.perf_counter()
        self.say(rec, vp)
        got: list = []
        if self._attempt(rec, rec.job.dst, lambda tmp: got.extend(self._encode(rec, vp, tmp))):
            end, frames, _, _ = got
            finish(rec, vp, frames, end, time.perf_counter() - t0)

    def segment(self, rec: Record, vp: VideoPlan, window: Window, path, bar=None) -> dict:
        """One segment of a planned clip into the segment file `path` (pipeline.sr.video.segments); returns what the
        join needs: the frames' (pts, duration), the packets' (pts, dts, duration), the reader's errors and end,
        the record's fields."""
        rec.out_size, rec.bit_depth = (vp.width, vp.height), vp.info.depth
        got: list = []
        if not self._attempt(rec, path, lambda tmp: got.extend(self._encode(rec, vp, tmp, window, True, bar))):
            return {"record": rec.as_dict()}
        end, _, timing, packets = got
        return {"record": rec.as_dict(), "timing": timing, "packets": packets, "errors": end.errors,
                "end_s": end.end_s, "seek_s": round(end.lead_s, 4)}


def _failed_frame(frames: list[tuple[Planned, Frame]], first: int | None, e: Exception | None = None) -> VideoError:
    """The clip's failure, its line naming the frame (not "the image"); `first`: the clip's number of frames[0]."""
    i = next((k for k, (p, _) in enumerate(frames) if p.failure), 0)
    reason = (frames[i][0].failure or str(e)).replace("the whole image", "the whole frame").replace(
        "nothing written for it", "the clip is not written")
    return VideoError(f"{_frame_name(frames[i][1], None if first is None else first + i)}: {reason}")


def _frame_name(f: Frame, n: int | None) -> str:
    """'frame 12 at 0.458 s' (the clip's frame number from 1 and its presentation time), as far as they are known."""
    at = f" at {f.time_s:.3f} s" if f.time_s is not None else ""
    return f"frame {n}{at}" if n is not None else f"the frame{at or ' (time unknown)'}"


def finish(rec: Record, vp: VideoPlan, frames: int, end: ReadEnd, wall: float, reused: int = 0) -> None:
    """A written clip's record: its video facts, and ok or failed (damaged or truncated: what was lost). `reused`:
    frames of segments a killed run made (--skip-existing), which this run's frames/s and time per frame leave out."""
    info = vp.info
    upscaled = frames - reused
    rec.video = {"frames": frames, "frames_expected": info.frames, "duration_s": info.duration_s,
                 "frame_rate_in": _rate(info.rate), "frame_rate_out": _rate(info.rate),
                 "fps": round(upscaled / wall, 3) if wall > 0 and upscaled > 0 else None,
                 "time_per_frame_s": round(wall / upscaled, 5) if upscaled > 0 else None,
                 **({"frames_reused": reused} if reused else {}),
                 "codec": vp.codec, "crf": vp.crf, "preset": vp.preset, "pix_fmt_in": info.pix_fmt,
                 "pix_fmt_out": vp.pix_fmt, "copied": info.copied}
    if end.errors or _short(info, frames, end):
        of = f" of {'' if info.frames_exact else '~'}{info.frames}" if info.frames else ""
        why = f": {end.errors[0]}" if end.errors else ""
        more = f" (+{len(end.errors) - 1} more)" if len(end.errors) > 1 else ""
        rec.fail(f"damaged or truncated video: upscaled the {frames}{of} frames that decoded into "
                 f"{rec.job.dst}{why}{more}")
        return
    rec.status = "ok"


def encoder_alone(src, dst, scale: float, threads: int, upscale_frame: Callable[[np.ndarray], np.ndarray]) -> \
        tuple[float, int]:
    """(seconds, frames) of the encoder alone as a run of clip `src` into `dst` at sr's defaults would use it: the
    clip's frames upscaled by `upscale_frame` first (untimed), then only the Writer (its RGB -> YUV conversion
    included) with `threads`: what the run's frames/s is held against (bench)."""
    job = Job(src, dst, src.name, video_format(dst))
    vp = plan(job, scale, None, None, "drop")
    frames = [(upscale_frame(f.pixels), f.pts, f.duration)
              for f in video_io.read(src, vp.info, copy=False) if isinstance(f, Frame)]
    writer = video_io.Writer(dst, job.fmt, vp.codec, vp.crf, vp.info, vp.width, vp.height, vp.pix_fmt, src,
                             vp.drop, preset=vp.preset, threads=threads)
    t0 = time.perf_counter()
    try:
        for f in frames:
            writer.frame(*f)
    finally:
        writer.close()
    return time.perf_counter() - t0, len(frames)
