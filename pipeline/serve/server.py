"""Runs NVIDIA's tritonserver on a model repository: the one `make triton-env` unpacked (Python backend only) or any
other binary; binds one address (127.0.0.1 by default), waits until the server says it is ready, and stops it
(SIGTERM, then SIGKILL after a grace period). The server dies with its parent (PR_SET_PDEATHSIG), so no server
outlives the command that started it.

Models whose backend the server lacks (the wheel's server has only `python`) are left unloaded and named, rather
than failing the whole start: the server runs in explicit model-control mode with the loadable ones."""
from __future__ import annotations

import collections
import contextlib
import ctypes
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from pipeline.errors import PipelineError
from pipeline.serve import pbtxt, protocol, triton_env

READY_TIMEOUT_S = 120.0   # model loading included (ONNX Runtime sessions, TensorRT engines)
STOP_GRACE_S = 15.0       # in-flight requests finish within this; then the server is killed
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ModelEntry:
    name: str
    backend: str   # the config's backend (or platform) field


@dataclass
class ServerPlan:
    """What `serve` will run: the command and which models it loads or leaves."""
    command: list[str]
    host: str
    ports: dict[str, int]
    load: list[ModelEntry]
    skipped: list[ModelEntry] = field(default_factory=list)

    def url(self, protocol: str) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        if protocol == "metrics":
            return f"http://{host}:{self.ports['metrics']}/metrics"
        return f"{protocol}://{host}:{self.ports[protocol]}"


def repository_models(repo: Path) -> list[ModelEntry]:
    """The models of a repository (folders with a config.pbtxt) and their backends."""
    if not repo.is_dir():
        raise PipelineError(f"model repository not found: {repo}")
    models = []
    for cfg in sorted(repo.glob("*/config.pbtxt")):
        fields = pbtxt.top_level(cfg.read_text(errors="replace"))
        backend = fields.get("backend") or fields.get("platform") or "?"
        backend = {"tensorrt_plan": "tensorrt", "onnxruntime_onnx": "onnxruntime"}.get(backend, backend)
        models.append(ModelEntry(cfg.parent.name, backend))
    if not models:
        raise PipelineError(f"{repo} holds no model (no <name>/config.pbtxt); write one with `python -m pipeline "
                            "triton`")
    return models


def numeric_host(host: str) -> str:
    """--host as the numeric address tritonserver needs (given `localhost` it binds 255.255.255.255 and fails
    minutes later): a name is resolved here, IPv4 first; one PipelineError line when it does not resolve."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise PipelineError(f"--host {host!r} is not an address and does not resolve ({e}); give an IP address "
                            "such as 127.0.0.1") from None
    found.sort(key=lambda f: f[0] != socket.AF_INET)
    return found[0][4][0]


def plan_server(repo: Path, *, binary: Path | None = None, host: str = "127.0.0.1", http_port: int = 8000,
                grpc_port: int = 8001, metrics_port: int = 8002, models: list[str] | None = None) -> ServerPlan:
    """Check everything (binary, repository, ports) and build the tritonserver command; starts nothing."""
    repo = Path(repo).resolve()
    entries = repository_models(repo)
    host = numeric_host(host)
    ports = {"http": http_port, "grpc": grpc_port, "metrics": metrics_port}
    for name, port in ports.items():
        if not 1 <= port <= 65535:
            raise PipelineError(f"--{name}-port must be 1-65535, got {port}")
    if len(set(ports.values())) != 3:
        raise PipelineError(f"the HTTP, gRPC and metrics ports must differ, got {sorted(ports.values())}")
    backends_dir = None
    if binary is None:
        why = triton_env.problem()
        if why:
            raise PipelineError(f"{why}; or give a tritonserver binary with --tritonserver PATH")
        binary, backends_dir = triton_env.server_binary(), triton_env.backend_dir()
    binary = Path(binary)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        raise PipelineError(f"tritonserver not found or not executable: {binary}")
    if models:
        unknown = sorted(set(models) - {e.name for e in entries})
        if unknown:
            have_names = ", ".join(e.name for e in entries)
            raise PipelineError(f"{repo} has no model {', '.join(unknown)} (it has: {have_names})")
        entries = [e for e in entries if e.name in models]
    have = {p.name for p in backends_dir.iterdir() if p.is_dir()} if backends_dir else None
    load = [e for e in entries if have is None or e.backend in have]
    skipped = [e for e in entries if e not in load]
    if not load:
        raise PipelineError(f"this tritonserver has none of the backends the models need "
                            f"({', '.join(sorted({e.backend for e in skipped}))}); its backends: "
                            f"{', '.join(sorted(have or []))}")
    for name, port in ports.items():
        _check_free(host, name, port)
    cmd = [str(binary), "--model-repository", str(repo), "--model-control-mode", "explicit",
           *[f"--load-model={e.name}" for e in load], "--strict-readiness", "true", "--exit-on-error", "true",
           "--exit-timeout-secs", str(int(STOP_GRACE_S)),
           "--http-address", host, "--http-port", str(http_port), "--grpc-address", host, "--grpc-port", str(grpc_port),
           "--metrics-address", host, "--metrics-port", str(metrics_port), "--allow-gpu-metrics", "false"]
    if backends_dir is not None:
        cmd += ["--backend-directory", str(backends_dir)]
    plugins = sorted(protocol.plugin_folder(repo).glob("*.so"))
    if plugins and any(e.backend == "tensorrt" for e in load):
        cmd.append(f"--backend-config=tensorrt,plugins={plugins[0]}")
    return ServerPlan(cmd, host, ports, load, skipped)


def _check_free(host: str, name: str, port: int) -> None:
    """PipelineError when something already listens on host:port: a readiness probe would be answered by it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no conflict
        try:
            s.bind((host, port))
        except OSError as e:
            raise PipelineError(f"{host}:{port} (--{name}-port) is taken ({e.strerror or e}): another server runs "
                                f"there; stop it or choose another --{name}-port") from None


def _serves_port(pid: int, port: int) -> bool | None:
    """Whether process `pid` or one of its children (a wrapper script's server) listens on `port` (None: the
    system does not say)."""
    try:
        root = psutil.Process(pid)
        for p in (root, *root.children(recursive=True)):
            if any(c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                   for c in p.net_connections("tcp")):
                return True
    except psutil.Error:  # gone meanwhile, or not ours to inspect
        return None
    return False


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent (this process) dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Server:
    """A started tritonserver; its output goes to the `log` file and `echo` (a stream; None: nowhere else), and its
    last lines are kept for errors."""

    def __init__(self, plan: ServerPlan, echo=None, log: Path | None = None):
        self.plan, self.log = plan, log
        self.tail: collections.deque[str] = collections.deque(maxlen=40)
        sink = None
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            sink = open(log, "w", encoding="utf-8")  # noqa: SIM115 - the reader thread closes it
        self.proc = subprocess.Popen(plan.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace", start_new_session=True, preexec_fn=_die_with_parent)
        self._reader = threading.Thread(target=self._pump, args=(echo, sink), daemon=True)
        self._reader.start()

    def _pump(self, echo, sink) -> None:
        try:
            for line in self.proc.stdout:
                self.tail.append(line.rstrip())
                for stream in (s for s in (echo, sink) if s is not None):
                    stream.write(line)
                    stream.flush()
        finally:
            if sink is not None:
                sink.close()

    def show_tail(self, lines: int = 20) -> None:
        """On a failure: the server's last lines, and where its whole log is."""
        if self.proc.poll() is not None:  # exited: every line it wrote is read
            self._reader.join(timeout=5)
        where = f" (all of it: {self.log})" if self.log is not None else ""
        kept = list(self.tail)[-lines:]
        print(f"tritonserver's last {len(kept)} log lines{where}:", *(f"  {ln}" for ln in kept), sep="\n",
              file=sys.stderr)

    def last_error(self) -> str:
        errors = [ln for ln in self.tail if ln.startswith("E") or "error" in ln.lower()]
        return (errors or list(self.tail) or ["no output"])[-1].strip()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.plan.url('http')}/v2/health/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds until ready; raises PipelineError if the server exits or takes longer."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                raise PipelineError(f"tritonserver exited (code {self.proc.returncode}) before it was ready: "
                                    f"{self.last_error()}")
            if self.ready():
                if _serves_port(self.proc.pid, self.plan.ports["http"]) is False:
                    self.stop()
                    raise PipelineError(f"another server answers on {self.plan.url('http')}, not the tritonserver "
                                        "started here: stop it or choose other ports (--http-port, --grpc-port, "
                                        "--metrics-port)")
                return time.monotonic() - t0
            time.sleep(0.2)
        self.stop()
        raise PipelineError(f"tritonserver was not ready within {timeout:.0f} s (last line: {self.last_error()})")

    def stop(self) -> int:
        """SIGTERM (Triton finishes in-flight requests), SIGKILL after the grace period; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_S + 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Python-backend stubs outlive a server that died (or was killed) without stopping them; they sit in the
        # server's process group (its own session), so the group goes with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self._reader.join(timeout=5)
        return self.proc.returncode


def serve(plan: ServerPlan, *, stop_after: float | None = None, echo=None, out=None, log: Path | None = None,
          tail: bool = True) -> int:
    """Start, wait for readiness, print the URLs, run until SIGINT/SIGTERM (or `stop_after` seconds), stop.
    The server's log goes to `log` (and `echo`); on a failure its last lines are printed (`tail`).
    Returns 0 after a requested stop, 1 when the server died by itself."""
    out = sys.stdout if out is None else out  # looked up now: a caller may have redirected it
    stopping = threading.Event()

    def on_signal(signum, frame):
        stopping.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = Server(plan, echo, log)
    try:
        try:
            seconds = server.wait_ready()
        except PipelineError:
            if tail:
                server.show_tail()
            raise
        names = ", ".join(f"{e.name} ({e.backend})" for e in plan.load)
        print(f"serving {names} from {plan.command[2]} (ready in {seconds:.1f} s)", file=out)
        for e in plan.skipped:
            print(f"not loaded: {e.name} (this server has no {e.backend} backend; an official Triton container has)",
                  file=out)
        print(f"HTTP     {plan.url('http')}\ngRPC     {plan.url('grpc')}\nmetrics  {plan.url('metrics')}\n"
              + (f"log      {log}\n" if log is not None else "") + "Ctrl-C or SIGTERM stops it", file=out, flush=True)
        deadline = None if stop_after is None else time.monotonic() + stop_after
        while not stopping.is_set() and server.proc.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                break
            stopping.wait(0.5)
        if server.proc.poll() is not None:
            if tail:
                server.show_tail()
            print(f"error: tritonserver exited by itself (code {server.proc.returncode}): {server.last_error()}",
                  file=sys.stderr)
            return 1
        print("stopping tritonserver", file=out, flush=True)
        code = server.stop()
        print(f"stopped (tritonserver exit code {code})", file=out, flush=True)
        return 0
    finally:
        server.stop()
        for s, handler in old.items():
            signal.signal(s, handler)
