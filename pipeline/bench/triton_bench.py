"""Served throughput: the same folder through a Triton server's `sr` model (`sr --triton`, gRPC, 1, 2 and 4 clients'
requests in flight) against the local folder run of the same backend on the same images, in one run.

The server is `python -m pipeline serve` on a repository written here (ONNX Runtime on the exported file), in a
private network namespace with only the loopback (`unshare -n`, root); the clients join it (`nsenter -n`), so a
benchmark never listens on the machine's network. Each run is a `python -m pipeline sr` process with a --summary
to read its times from. `bench` calls `triton_bench`; pipeline.report renders it (`triton_markdown`)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from models.spec import DEFAULT_MODEL
from pipeline import report
from pipeline.bench.sr_runs import RUN_LIMIT_S, median, timed_sr
from pipeline.errors import PipelineError
from pipeline.serve import triton_env
from pipeline.serve.triton_repo import write_repository

READY_LIMIT_S = 180


def problem() -> str | None:
    """Why the served comparison cannot run here, or None."""
    for tool in ("unshare", "nsenter", "ip"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux, iproute2) for a private network namespace"
    return triton_env.problem()


class _IsolatedServer:
    """`python -m pipeline serve REPO` in a fresh network namespace; stops by itself after RUN_LIMIT_S."""

    def __init__(self, repo: Path):
        cmd = (f"ip link set lo up && exec {sys.executable} -m pipeline serve {repo} --quiet "
               f"--stop-after {RUN_LIMIT_S}")
        self.proc = subprocess.Popen(["unshare", "-n", "sh", "-c", cmd], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        ready = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.lines.append(line)
                if line.startswith("gRPC"):
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        t0 = time.monotonic()
        while not ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() - t0 > READY_LIMIT_S:
                self.stop()
                tail = [ln.strip() for ln in self.lines if ln.strip()][-1:] or ["no output"]
                raise PipelineError(f"the Triton server did not start: {tail[0]}")

    def command(self, args: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.proc.pid), "-n", *args]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def triton_bench(folder: str | Path, *, model: str = DEFAULT_MODEL, clients: tuple[int, ...] = (1, 2, 4),
                 repeats: int = 1, log=print) -> dict:
    """Time `sr folder` locally (ort on the repository's ONNX file) and with --triton grpc://... --concurrency N
    for each N, `repeats` times each (medians)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PipelineError(f"bench folder not found: {folder}")
    why = problem()
    if why:
        raise PipelineError(why)
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="triton-bench-") as tmp:
        repo = Path(tmp) / "repo"
        result = write_repository(model, repo, backend="ort", log=log)
        sr = [sys.executable, "-m", "pipeline", "sr", str(folder)]
        server = _IsolatedServer(repo)
        try:
            configs = [("local", False, ["--backend", "ort", "--onnx", str(result.model_file)])] + [
                (f"triton-{n}", True, ["--triton", "grpc://127.0.0.1:8001", "--concurrency", str(n)]) for n in clients]
            for _ in range(repeats):
                for name, served, extra in configs:
                    out, summary = Path(tmp) / name, Path(tmp) / f"{name}.json"
                    shutil.rmtree(out, ignore_errors=True)
                    log(f"triton bench: {name} ...")
                    cmd = [*sr, str(out), "--quiet", "--summary", str(summary), *extra]
                    runs.setdefault(name, []).append(timed_sr(server.command(cmd) if served else cmd, summary, name))
        finally:
            server.stop()
    return summarize(runs, clients)


def summarize(runs: dict[str, list[dict]], clients: tuple[int, ...]) -> dict:
    local = runs["local"]
    n = local[0]["images"]
    local_proc = median(local, "process_s")
    result = {"images": n, "repeats": len(local), "backend": local[0]["backend"],
              "local": {"wall_s": median(local, "wall_s"), "process_s": local_proc,
                        "images_per_s": n / local_proc if local_proc > 0 else None}, "triton": {}}
    for k in clients:
        rs = runs[f"triton-{k}"]
        proc = median(rs, "process_s")
        ips = n / proc if proc > 0 else None
        result["triton"][k] = {"wall_s": median(rs, "wall_s"), "process_s": proc, "images_per_s": ips,
                               "vs_local": ips / result["local"]["images_per_s"]
                               if ips and result["local"]["images_per_s"] else None}
    return result


if __name__ == "__main__":  # python -m pipeline.bench.triton_bench FOLDER [REPEATS]
    res = triton_bench(sys.argv[1], repeats=int(sys.argv[2]) if len(sys.argv) > 2 else 1,
                       log=lambda m: print(m, file=sys.stderr))
    print("\n".join(report.triton_markdown(res)))
    print(json.dumps(res, indent=2))
