"""Runs a folder's images through an ImageWorker with decoding and encoding overlapped with inference.

Decoding runs ahead on a small pool (bounded prefetch), inference runs on the calling thread (whole
images of one size batched up to --batch, large ones tiled; a batch is collected after the next one was
submitted, so a device backend works while this thread reads; the backend's samples become the output without a
copy), and encoding + the atomic write run on a second pool behind a queue bounded in bytes, so memory stays bounded
however large the folder is. Whatever per-image work can run there does (a BGRA output's assembly, PNG encoding).
"""
from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from pipeline.images.imageio import ImageError
from pipeline.sr.runner.console import Console, image_line
from pipeline.sr.runner.records import Record
from pipeline.sr.runner.worker import Decoded, ImageWorker, Planned, decode, infer_reason, write_reason

# Images being decoded at once beyond the pool size and the batch; bounds memory along with WRITE_BYTES.
PREFETCH = 2
WRITE_BYTES = 512 << 20
# Outputs the write queue always admits, whatever their size: one encoding while the next is queued, so outputs
# over WRITE_BYTES still overlap inference and encoding instead of taking turns.
MIN_QUEUED = 2


class Scheduler:
    def __init__(self, worker: ImageWorker, console: Console, workers: int = 2, write_bytes: int = WRITE_BYTES):
        self.worker = worker
        self.console = console
        self.workers = workers
        self.write_limit = write_bytes
        self.decoding: deque[tuple[Record, Future]] = deque()
        self.writing: deque[tuple[Planned, Future]] = deque()
        self.write_bytes = 0
        self.pending: list[Planned] = []  # whole images of one size waiting to fill a batch
        self.inflight: deque[tuple[list[Planned], Callable[[], None]]] = deque()  # submitted, not collected
        self.done_mpix = 0.0
        self.t0 = 0.0
        self.bar = None      # these three exist while run() runs
        self.readers: ThreadPoolExecutor | None = None
        self.writers: ThreadPoolExecutor | None = None

    # -- progress and failures ---------------------------------------------------------------------------

    def _finished(self, rec: Record) -> None:
        if rec.status == "ok":
            self.done_mpix += rec.out_mpix
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        self.bar.set_postfix_str(f"{self.done_mpix / elapsed:.2f} MPix/s", refresh=False)
        self.bar.update(1)

    def _fail(self, rec: Record, reason: str) -> None:
        rec.fail(reason)
        self.console.failed(rec)
        self._finished(rec)

    # -- the write queue ----------------------------------------------------------------------------------

    def _room(self, nbytes: int) -> bool:
        """Whether an output of `nbytes` may join the write queue: within the byte cap, or one of the first
        MIN_QUEUED (so a large output waits for the one before it, not for the queue to empty)."""
        return len(self.writing) < MIN_QUEUED or self.write_bytes + nbytes <= self.write_limit

    def _reap(self, incoming: int | None = None, drain: bool = False) -> None:
        """Collect finished writes; wait for the oldest while an `incoming` output has no room, or (`drain`)
        until none is left."""
        while self.writing and (self.writing[0][1].done() or drain
                                or (incoming is not None and not self._room(incoming))):
            item, fut = self.writing.popleft()
            self.write_bytes -= item.out.nbytes
            try:
                fut.result()
            except Exception as e:  # an encoder or file system failure on one image must not stop the batch
                self._fail(item.rec, write_reason(item.rec, e))
                continue
            item.rec.status = "ok"
            self._finished(item.rec)

    def _submit_write(self, item: Planned) -> None:
        self._reap(incoming=item.out.nbytes)  # bound the output buffers waiting for the encoder
        item.rec.inferred(item)
        self.writing.append((item, self.writers.submit(self.worker.encode, item, item.rec)))
        self.write_bytes += item.out.nbytes
        self.console.info(image_line(item.rec, self.worker.scale))

    # -- inference ------------------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Submit the waiting batch of equal-size whole images, then collect the oldest batches until fewer than the
        worker's `in_flight` are left (one: the batch before it; on CPU streams, one per stream)."""
        items, self.pending = self.pending, []
        if not items:
            return
        try:
            finish = self.worker.submit_batch(items)
        except Exception as e:  # the batch's images fail; the run goes on
            self._fail_all(items, e)
            return
        self.inflight.append((items, finish))
        while len(self.inflight) >= self.worker.in_flight:
            self._collect_one()

    def _collect(self) -> None:
        """Collect every batch in flight and queue their images for writing."""
        while self.inflight:
            self._collect_one()

    def _collect_one(self) -> None:
        items, finish = self.inflight.popleft()
        try:
            finish()
        except Exception as e:  # likewise
            self._fail_all(items, e)
            return
        for it in items:
            if it.failure:  # its output could not be made finite: nothing is written for it
                self._fail(it.rec, it.failure)
            else:
                self._submit_write(it)

    def _fail_all(self, items: list[Planned], e: Exception) -> None:
        reason = infer_reason(e)
        for it in items:
            self._fail(it.rec, reason)

    def _infer(self, item: Planned) -> None:
        if self.worker.batchable(item):
            if self.pending and self.pending[0].image.pixels.shape[:2] != item.image.pixels.shape[:2]:
                self._flush()
            self.pending.append(item)
            if len(self.pending) >= self.worker.batch:
                self._flush()
            return
        self._flush()
        self._collect()
        try:
            self.worker.infer_tiled(item, self.console.tiles(item.rec.job.rel) if item.plan.count > 1 else None)
        except Exception as e:  # this image fails; the run goes on
            self._fail(item.rec, infer_reason(e))
            return
        self._submit_write(item)

    def _take(self, rec: Record, decoded: Decoded) -> None:
        """One decoded image: plan it and run (or queue) its inference."""
        rec.decode_s = decoded.seconds
        if decoded.image is None:
            self._fail(rec, decoded.reason)
            return
        try:
            item = self.worker.plan(decoded.image, rec.job.fmt)
        except ImageError as e:
            self._fail(rec, str(e))
            return
        item.rec = rec
        rec.take(item)
        for n in rec.notes:
            self.console.info(f"{rec.job.rel}: {n}")
        self._infer(item)

    # -- the run ----------------------------------------------------------------------------------------------

    def _refill(self, queue: deque[Record]) -> None:
        while queue and len(self.decoding) < self.workers + PREFETCH + self.worker.batch:
            rec = queue.popleft()
            self.decoding.append((rec, self.readers.submit(decode, rec.job)))

    def run(self, todo: list[Record]) -> float:
        """Process every record; returns the seconds from the first decode to the last write."""
        self.t0 = time.perf_counter()
        self.bar = self.console.bar(len(todo))
        self.readers = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sr-decode")
        self.writers = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sr-encode")
        queue = deque(todo)
        # The objects that exist now (the loaded libraries' hundreds of thousands) are left out of the collector's
        # passes while the run makes its own: each full pass over them took ~1 % of the run's CPU. A process that
        # froze objects itself (a pre-fork server) keeps its own freeze: it is neither extended nor undone here.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            self._refill(queue)
            while self.decoding:
                rec, fut = self.decoding.popleft()
                self._refill(queue)
                decoded = fut.result()
                self._reap()
                self._take(rec, decoded)
            self._flush()
            self._collect()
            self._reap(drain=True)
        except KeyboardInterrupt:
            # stop reading; the batch in flight (inferred before the interrupt) is written too, and writes under
            # way finish (each is atomic) and count as done in the summary
            self.readers.shutdown(wait=True, cancel_futures=True)
            self._collect()
            self.writers.shutdown(wait=True)
            self._reap(drain=True)
            raise
        finally:
            if freeze:
                gc.unfreeze()  # collectable again after the run (a long-lived process runs many)
            self.readers.shutdown(wait=True, cancel_futures=True)
            self.writers.shutdown(wait=True)
            self.bar.close()
        return time.perf_counter() - self.t0
