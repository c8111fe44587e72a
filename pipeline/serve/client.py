"""`python -m pipeline sr INPUT OUTPUT --triton URL`: a file or folder upscaled by the `sr` model of a running
Triton server (`python -m pipeline serve REPO`), over HTTP (http://HOST:PORT) or gRPC (grpc://HOST:PORT).

The run is the local one with inference moved to the server: the same job list and OUTPUT tree
(pipeline.sr.jobs), --skip-existing, summary and exit codes (pipeline.sr.api), and the same encoder and atomic
writes (pipeline.sr.imageio), so the files are byte-identical to a local run of the server's backend. Each file
goes to the server as it is (the server decodes, tiles and infers it) and comes back as pixels that are encoded
here. `--concurrency N` requests are in flight at once, each on its own connection.

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
from urllib.parse import urlsplit

import numpy as np

from pipeline.artifacts.atomic import atomic_write
from pipeline.errors import PipelineError, first_line
from pipeline.serve.tensors import ARRAY, output_from_array
from pipeline.sr import imageio, preflight, settings
from pipeline.sr.api import report_run, say_triage, triage
from pipeline.sr.console import Console, count_text, plural
from pipeline.sr.jobs import discover
from pipeline.sr.records import Record, Summary
from pipeline.sr.worker import write_reason

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
        if config.get("backend") != "python" or "image_bytes" not in {i["name"] for i in config.get("input", [])}:
            raise PipelineError(f"Triton model '{name}' is not an sr model (images in, images out); the sr model of a "
                                "repository `python -m pipeline triton` wrote is 'sr'")
        return {k: v.get("string_value", v.get("stringValue", "")) for k, v in (config.get("parameters") or {}).items()}

    def upscale(self, data: bytes, scale: float) -> tuple[np.ndarray, dict]:
        """(pixels as the local run's output buffer, the server's info); raises ServerLost or another exception
        whose message is this image's failure."""
        tc = self.tc
        inputs = [tc.InferInput("image_bytes", [1, 1], "BYTES"), tc.InferInput("scale", [1, 1], "FP64"),
                  tc.InferInput("format", [1, 1], "BYTES")]
        inputs[0].set_data_from_numpy(np.array([[data]], dtype=np.object_))
        inputs[1].set_data_from_numpy(np.array([[scale]], dtype=np.float64))
        inputs[2].set_data_from_numpy(np.array([[ARRAY.encode()]], dtype=np.object_))
        outputs = [tc.InferRequestedOutput(n) for n in ("output_u8", "output_u16", "info")]
        try:
            timeout = {"client_timeout": NETWORK_TIMEOUT_S} if self.endpoint.protocol == "grpc" else {}
            result = self.client.infer(self.endpoint.model, inputs, outputs=outputs, **timeout)
        except Exception as e:
            if not self.live():
                raise ServerLost(_message(e)) from None
            raise
        info = json.loads(result.as_numpy("info").reshape(-1)[0])
        pixels = result.as_numpy("output_u16" if info["bit_depth"] == 16 else "output_u8")
        if pixels is None:
            raise ServerLost("the server answered without the image")
        return output_from_array(pixels[0]), info

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a connection to a dead server
            self.client.close()


class _Run:
    """The requests of one run, `concurrency` at a time, each thread with its own connection."""

    def __init__(self, endpoint: Endpoint, scale: float, jpeg_quality: int, console: Console, concurrency: int):
        self.endpoint, self.scale, self.quality = endpoint, scale, jpeg_quality
        self.console, self.concurrency = console, concurrency
        self.local = threading.local()
        self.clients: list[Client] = []
        self.lock = threading.Lock()
        self.lost: str | None = None
        self.backend = ""

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
        self.backend = self.backend or info.get("backend", "")
        t1 = time.perf_counter()
        try:
            rec.notes.extend(imageio.write_image(rec.job.dst, out, rec.job.fmt, self.quality))
        except Exception as e:  # this file's encoder or file system error
            rec.fail(write_reason(rec, e))
            return
        rec.encode_s = time.perf_counter() - t1
        rec.status = "ok"

    def all(self, todo: list[Record]) -> float:
        """Run every record; returns the processing seconds. Sets self.lost when the server went away."""
        t0 = time.perf_counter()
        bar = self.console.bar(len(todo))
        queue = list(reversed(todo))
        try:
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
                        rec = running.pop(fut)
                        try:
                            fut.result()
                        except ServerLost as e:
                            self.lost = self.lost or str(e)
                            continue
                        if rec.status == "failed":
                            self.console.always(f"failed {rec.job.rel}: {rec.reason}")
                        elif rec.status == "ok":
                            self.console.info(f"{rec.job.rel}: {rec.in_size[0]}x{rec.in_size[1]} -> "
                                              f"{rec.out_size[0]}x{rec.out_size[1]} (x{self.scale:g}, {rec.mode} "
                                              f"{rec.bit_depth}-bit, {rec.tiles} tile{'s' if rec.tiles != 1 else ''})")
                        bar.update(1)
        finally:
            bar.close()
            for c in self.clients:
                c.close()
        return time.perf_counter() - t0


def _scale(params: dict[str, str], scale: float | None) -> float:
    """--scale checked against the served model's range (its config parameters) before any request; without
    --scale, the served model's default (a model that states none needs --scale)."""
    if scale is None:
        if "default_scale" not in params:
            raise PipelineError("the served model states no default scale: give --scale")
        scale = params["default_scale"]
    try:
        scale = float(scale)
    except ValueError:
        raise PipelineError(f"the served model's default scale {scale!r} is not a number: give --scale") from None
    try:
        lo, hi = (float(v) for v in params["scale_range"].split("-", 1))
    except (KeyError, ValueError):
        return scale  # no range stated: the server checks it
    if not lo <= scale <= hi:
        raise PipelineError(f"scale {scale:g} is outside the served model's range {lo:g}-{hi:g}")
    return scale


LOCAL_ONLY = ("onnx", "engine", "weights", "threads", "tile", "tile_overlap", "reference", "ray", "ray_actors", "codec",
              "crf")


def run_triton(args) -> int:
    """The CLI's `sr --triton URL` run; returns the exit code."""
    t_start = time.perf_counter()
    given = [f"--{k.replace('_', '-')}" for k in LOCAL_ONLY if getattr(args, k, None) is not None]
    if args.backend != "auto" or args.precision != "fp32" or args.batch != 1:
        given += ["--backend/--precision/--batch"]
    if given:
        raise PipelineError(f"{', '.join(given)} apply to local runs; with --triton the served model decides")
    if args.concurrency < 1:
        raise PipelineError(f"--concurrency must be at least 1, got {args.concurrency}")
    settings.check_numbers(tile=None, tile_overlap=None, batch=1, workers=1, threads=None,
                           jpeg_quality=args.jpeg_quality)
    fmt = settings.check_format(args.fmt)
    settings.check_paths(summary=args.summary, reference=None, onnx=None, engine=None, weights=None)
    endpoint = parse_url(args.triton, args.triton_model)
    found = discover(args.input, args.output, fmt)
    if not found.jobs:
        raise PipelineError(f"no images found in {args.input} (extensions: {imageio.extensions_text()})")
    if found.videos:  # the sr model takes images; a clip is one sequential stream (run videos locally)
        raise PipelineError(f"--triton upscales images; {found.videos[0].rel} is a video (run videos without "
                            "--triton)")
    preflight.check_writable(found, args.output, args.summary, uses_cache=False)  # before asking the server
    probe = Client(endpoint)
    try:
        params = probe.model_parameters()
    finally:
        probe.close()
    model = params.get("model", endpoint.model)
    if args.model is not None and args.model != model:
        raise PipelineError(f"the served model '{endpoint.model}' runs {model}, not {args.model}")
    scale = _scale(params, args.scale)

    console = Console(not args.quiet)
    console.always(f"sr: {model} x{scale:g} on Triton {endpoint.url} (model '{endpoint.model}', backend "
                   f"{params.get('backend', '?')}, {args.concurrency} request(s) at a time); "
                   f"{count_text(len(found.jobs))} -> {args.output}")
    records, todo, failures = triage(found, args.skip_existing)
    say_triage(records, failures, console)
    run = _Run(endpoint, scale, args.jpeg_quality, console, args.concurrency)
    setup_s = time.perf_counter() - t_start
    process_s = run.all(todo)
    summary = Summary(model=model, scale=scale, backend=f"triton {endpoint.url} {endpoint.model}: {run.backend}",
                      backend_choice="--triton", input=str(args.input), output=str(args.output), tile=None,
                      tile_margin_hr=0, batch=1, workers=args.concurrency, records=records, ignored=found.ignored,
                      wall_s=time.perf_counter() - t_start, process_s=process_s, setup_s=setup_s)
    if args.summary is not None:
        atomic_write(Path(args.summary), json.dumps(summary.to_dict(), indent=2) + "\n")
    if run.lost is not None:
        left = sum(r.status == "pending" for r in records)
        console.always(f"error: the Triton server at {endpoint.url} stopped answering ({run.lost}); "
                       f"{plural(len(summary.ok), 'image')} written, {left} not; rerun with --skip-existing to finish")
        return 1
    report_run(summary, None, console)
    return 1 if summary.failed else 0
