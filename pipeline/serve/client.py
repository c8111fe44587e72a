"""`python -m pipeline sr INPUT OUTPUT --triton URL`: a file or folder upscaled by the `sr` model of a running
Triton server (`python -m pipeline serve REPO`), over HTTP (http://HOST:PORT) or gRPC (grpc://HOST:PORT).

The run is the local one with inference moved to the server (pipeline.sr.flow with this module's TritonExecutor):
the same job list and OUTPUT tree, --skip-existing, summary and exit codes, and the same encoder and atomic
writes (pipeline.sr.write_output), so the files are byte-identical to a local run of the server's backend. Each file
goes to the server as it is (the server decodes, tiles and infers it) and comes back as pixels that are encoded
here. `--concurrency N` requests are in flight at once, each on its own connection.

A video is decoded and encoded here exactly as a local run does (pipeline.sr's VideoRunner): its frames go to the
server as pixel arrays, `--concurrency` at a time, and are written in order as the answers come.

A file the server cannot read is that file's failure; the run goes on. A server that stops answering ends the run
with one line and exit 1; outputs are only ever renamed into place, so a rerun with --skip-existing finishes."""
from __future__ import annotations

import contextlib
import json
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import numpy as np

from pipeline import sr
from pipeline.errors import PipelineError, first_line
from pipeline.serve import protocol
from pipeline.serve import tensors as T
from pipeline.sr import ExecutorLost, Plan, Record, RunOptions, Started, write_output

if TYPE_CHECKING:
    from pipeline.sr.runner.console import Console

PROTOCOLS = ("http", "grpc")
NETWORK_TIMEOUT_S = 600.0   # one large image's round trip (decode, tiles, inference, transfer)


class ServerLost(Exception):
    """The server stopped answering (not one image's problem)."""


@dataclass(frozen=True)
class Endpoint:
    protocol: str   # http | grpc
    address: str    # HOST:PORT
    model: str

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.address}"


def parse_url(url: str, model: str) -> Endpoint:
    """http://HOST:PORT or grpc://HOST:PORT (what `serve` prints)."""
    parts = urlsplit(url)
    if parts.scheme not in PROTOCOLS or not parts.hostname or parts.port is None or parts.path not in ("", "/"):
        raise PipelineError(f"--triton takes http://HOST:PORT or grpc://HOST:PORT (as `serve` prints), got '{url}'")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return Endpoint(parts.scheme, f"{host}:{parts.port}", model)


def _message(e: BaseException) -> str:
    msg = e.message() if callable(getattr(e, "message", None)) else str(e)
    return first_line(msg or type(e).__name__).removeprefix("[StatusCode.INTERNAL] ").strip()


class Client:
    """One connection to the server (tritonclient clients are not shared between threads)."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        if endpoint.protocol == "http":
            import tritonclient.http as tc

            self.client = tc.InferenceServerClient(endpoint.address, connection_timeout=NETWORK_TIMEOUT_S,
                                                   network_timeout=NETWORK_TIMEOUT_S)
        else:
            import tritonclient.grpc as tc

            self.client = tc.InferenceServerClient(endpoint.address)
        self.tc = tc

    def live(self) -> bool:
        try:
            return bool(self.client.is_server_live())
        except Exception:  # any transport error: not answering
            return False

    def model_parameters(self) -> dict[str, str]:
        """The sr model's config parameters; PipelineError when the server or the model is not there."""
        name = self.endpoint.model
        try:
            if not self.client.is_model_ready(name):
                raise PipelineError(f"the Triton server at {self.endpoint.url} has no ready model '{name}' "
                                    "(write it with `python -m pipeline triton`, or name it with --triton-model)")
            config = self.client.get_model_config(name, **({"as_json": True} if self.endpoint.protocol == "grpc"
                                                           else {}))
        except PipelineError:
            raise
        except Exception as e:
            raise PipelineError(f"cannot reach the Triton server at {self.endpoint.url}: {_message(e)}") from None
        config = config.get("config", config)
        if config.get("backend") != "python" or T.IMAGE_BYTES not in {i["name"] for i in config.get("input", [])}:
            raise PipelineError(f"Triton model '{name}' is not an sr model (images in, images out); the sr model of a "
                                "repository `python -m pipeline triton` wrote is 'sr'")
        return {k: v.get("string_value", v.get("stringValue", "")) for k, v in (config.get("parameters") or {}).items()}

    def upscale(self, data: bytes, scale: float) -> tuple[np.ndarray, dict]:
        """(pixels as the local run's output buffer, the server's info); raises ServerLost or another exception
        whose message is this image's failure."""
        image = self.tc.InferInput(T.IMAGE_BYTES, [1, 1], "BYTES")
        image.set_data_from_numpy(np.array([[data]], dtype=np.object_))
        return self._ask(image, scale)

    def upscale_pixels(self, pixels: np.ndarray, scale: float) -> tuple[np.ndarray, dict]:
        """upscale() for decoded pixels (a video frame: BGR(A) as the local run holds it) sent as an array."""
        a = T.array_from_output(pixels)[None]
        name = "pixels_u16" if a.dtype == np.uint16 else "pixels_u8"
        image = self.tc.InferInput(name, list(a.shape), "UINT16" if a.dtype == np.uint16 else "UINT8")
        image.set_data_from_numpy(a)
        return self._ask(image, scale)

    def _ask(self, image, scale: float) -> tuple[np.ndarray, dict]:
        tc = self.tc
        inputs = [image, tc.InferInput(T.SCALE, [1, 1], "FP64"), tc.InferInput(T.FORMAT, [1, 1], "BYTES")]
        inputs[1].set_data_from_numpy(np.array([[scale]], dtype=np.float64))
        inputs[2].set_data_from_numpy(np.array([[T.ARRAY.encode()]], dtype=np.object_))
        outputs = [tc.InferRequestedOutput(n) for n in (T.OUTPUT_U8, T.OUTPUT_U16, T.INFO)]
        try:
            timeout = {"client_timeout": NETWORK_TIMEOUT_S} if self.endpoint.protocol == "grpc" else {}
            result = self.client.infer(self.endpoint.model, inputs, outputs=outputs, **timeout)
        except Exception as e:
            if not self.live():
                raise ServerLost(_message(e)) from None
            raise
        info = json.loads(result.as_numpy(T.INFO).reshape(-1)[0])
        pixels = result.as_numpy(T.OUTPUT_U16 if info["bit_depth"] == 16 else T.OUTPUT_U8)
        if pixels is None:
            raise ServerLost("the server answered without the image")
        return T.output_from_array(pixels[0]), info

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a connection to a dead server
            self.client.close()


class TritonExecutor:
    """The requests of one run, `concurrency` at a time, each thread with its own connection; the server decodes,
    tiles and infers, this process encodes and writes (pipeline.sr.flow's Executor)."""

    name = "triton"
    takes_videos = True   # decoded and encoded here, frames served
    streams = False
    uses_cache = False
    # what this process still does: the job list, the outputs' encoding and the report; the server the rest
    takes = frozenset({"input", "output", "model", "scale", "fmt", "jpeg_quality", "skip_existing", "summary",
                       "progress", "verbose", "codec", "crf", "preset", "audio", "log"})
    why_not = "with --triton the served model decides, and --concurrency the threads here"
    flags = ("triton", "triton_model", "concurrency")

    def __init__(self, opts: RunOptions, url: str, model: str | None = None, concurrency: int | None = None):
        concurrency = 2 if concurrency is None else concurrency
        if concurrency < 1:
            raise PipelineError(f"--concurrency must be at least 1, got {concurrency}")
        self.endpoint = parse_url(url, "sr" if model is None else model)
        self.opts, self.concurrency = opts, concurrency
        self.local = threading.local()
        self.clients: list[Client] = []
        self.lock = threading.Lock()
        self.lost: str | None = None
        self.backend = ""
        self.locks: dict = {}

    def model(self, opts: RunOptions) -> None:
        return None  # the served model says which, at start

    def start(self, plan: Plan, console: Console) -> Started:
        """Ask the server for its sr model's parameters (after every local check, before any request)."""
        probe = Client(self.endpoint)
        try:
            params = probe.model_parameters()
        finally:
            probe.close()
        served = protocol.Served.from_parameters(params)
        model = served.model or self.endpoint.model
        if self.opts.model is not None and self.opts.model != model:
            raise PipelineError(f"the served model '{self.endpoint.model}' runs {model}, not {self.opts.model}")
        self.scale = served.check_scale(self.opts.scale)
        self.served = served.backend
        self.clips = [r for r in plan.todo if r.job.video]
        self.plans, what = {}, []
        if self.clips:  # PyAV loads only for runs with videos
            o = self.opts
            self.plans = sr.plan_clips(self.clips, self.scale, o.codec, o.crf, o.audio, o.preset)
            self.locks = sr.lock_outputs(self.clips)  # one writer per output, as local and Ray runs
            if len(plan.found.jobs) == 1 and self.plans:  # one clip: its notes in the first line, once
                only = next(iter(self.plans.values()))
                what, only.notes_said = only.notes, True
        return Started(model, self.scale, f"Triton {self.endpoint.url}",
                       f"model '{self.endpoint.model}', backend {self.served}, {self.concurrency} request(s) at a "
                       f"time", f"triton {self.endpoint.url} {self.endpoint.model}: {self.served}", "--triton",
                       what=what, workers=self.concurrency)

    def announce(self, console: Console) -> None:
        pass

    def _client(self) -> Client:
        if not hasattr(self.local, "client"):
            self.local.client = Client(self.endpoint)
            with self.lock:
                self.clients.append(self.local.client)
        return self.local.client

    def one(self, rec: Record) -> None:
        """One image: read, request, encode and write here; failures go to the record, a lost server up."""
        if self.lost is not None:
            return
        t0 = time.perf_counter()
        try:
            data = Path(rec.job.src).read_bytes()
        except OSError as e:
            rec.fail(f"cannot read: {e.strerror or e}")
            return
        try:
            out, info = self._client().upscale(data, self.scale)
        except ServerLost:
            raise
        except Exception as e:  # the server's answer for this image (unreadable, too large, ...)
            rec.fail(_message(e))
            return
        rec.infer_s = time.perf_counter() - t0  # the request: transfer, the server's decode, tiles and inference
        rec.in_size, rec.out_size = tuple(info["in_size"]), tuple(info["out_size"])
        rec.mode, rec.bit_depth, rec.tiles = info["mode"], info["bit_depth"], info["tiles"]
        rerun = info.get("rerun_fp32") or {}
        rec.rerun, rec.rerun_reason = int(rerun.get("tiles", 0)), str(rerun.get("reason", ""))
        self.backend = self.backend or info.get("backend", "")
        write_output(rec, out, self.opts.jpeg_quality)

    def _reap(self, fut, rec: Record, console: Console) -> None:
        try:
            fut.result()
        except ServerLost as e:
            self.lost = self.lost or str(e)
            return
        if rec.status == "failed":
            console.failed(rec)
        elif rec.status == "ok":
            console.written(rec, self.scale)

    def _frame(self, pixels: np.ndarray) -> tuple[np.ndarray, dict]:
        out, info = self._client().upscale_pixels(pixels, self.scale)
        self.backend = self.backend or info.get("backend", "")
        return out, info

    def _videos(self, console: Console) -> None:
        """The clips one after another, decoded and encoded here, frames served `concurrency` at a time."""
        runner = sr.VideoRunner(None, console, scale=self.scale, remote=self._frame, inflight=self.concurrency,
                                fatal=(ServerLost,))
        try:
            runner.run_all(self.clips, self.plans)
        except ServerLost as e:
            self.lost = self.lost or str(e)

    def execute(self, todo: list[Record], console: Console, finished) -> float:
        """Every record, in place; returns the processing seconds. ExecutorLost when the server went away."""
        t0 = time.perf_counter()
        self._images([r for r in todo if not r.job.video], console)
        if self.clips and self.lost is None:
            self._videos(console)
        if self.lost is not None:
            raise ExecutorLost(f"the Triton server at {self.endpoint.url} stopped answering ({self.lost})")
        return time.perf_counter() - t0

    def _images(self, todo: list[Record], console: Console) -> None:
        if not todo and self.clips:
            return
        bar = console.bar(len(todo))
        queue = list(reversed(todo))
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix="sr-triton") as pool:
            running = {}
            while queue or running:
                while queue and len(running) < self.concurrency and self.lost is None:
                    rec = queue.pop()
                    running[pool.submit(self.one, rec)] = rec
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    self._reap(fut, running.pop(fut), console)
                    bar.update(1)
        bar.close()

    def facts(self) -> dict:
        return {"url": self.endpoint.url, "model": self.endpoint.model, "concurrency": self.concurrency,
                "backend": f"triton {self.endpoint.url} {self.endpoint.model}: {self.backend or self.served}"}

    def close(self) -> None:
        for c in self.clients:
            c.close()
        for lock in self.locks.values():
            lock.release()
