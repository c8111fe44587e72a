"""`python -m pipeline sr ... --ray`: folder runs on a local Ray cluster of 2 CPUs, each test starting and stopping
its own. Ray binds the machine's interface even when asked for 127.0.0.1, so every run that starts Ray happens
in a private network namespace with only the loopback up (`unshare -n`): nothing but 127.0.0.1 is reachable.
Tests skip, saying why, where such a namespace cannot be made or Ray is not installed."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from skimage import data

from models.spec import output_size
from pipeline.cli import main
from pipeline.cluster.ray_log import RAY_LINE, keep
from tests.netns import namespace_problem

pytest.importorskip("ray.data", reason="Ray with Ray Data is not installed (pip install -e '.[cluster]')")
REPO = Path(__file__).resolve().parents[1]
RUN_LIMIT_S = 300  # every Ray run ends by then, or the test fails and its processes are killed


NAMESPACE_PROBLEM = namespace_problem()
in_namespace = pytest.mark.skipif(NAMESPACE_PROBLEM is not None, reason=str(NAMESPACE_PROBLEM))


def _command(args: list[str]) -> list[str]:
    """`python -m pipeline sr ARGS` inside a fresh network namespace with only the loopback up. `exec` keeps the
    driver's pid the one Popen returns."""
    py = " ".join(["exec", sys.executable, "-m", "pipeline", "sr", *[_quote(a) for a in args]])
    return ["unshare", "-n", "sh", "-c", f"ip link set lo up && {py}"]


def _quote(a: str) -> str:
    import shlex

    return shlex.quote(str(a))


def _env(cache: Path, extra: dict | None = None) -> dict:
    return {**os.environ, "SRDEPLOY_CACHE": str(cache), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
            **(extra or {})}


def _start(args: list[str], cache: Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(_command(args), cwd=REPO, env=_env(cache, env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen, limit: float = RUN_LIMIT_S) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver's session: the driver and the cluster it started
        proc.communicate()
        pytest.fail(f"the Ray run did not end within {limit} s")
    return proc.returncode, err


def ray_sr(args: list[str], cache: Path) -> tuple[int, str]:
    return _finish(_start(args, cache))


@pytest.fixture
def cache() -> Path:
    """The test session's artifact cache (tests/conftest.py): the runs below share its ONNX exports."""
    return Path(os.environ["SRDEPLOY_CACHE"])


def _write(path: Path, pixels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(path.suffix, pixels)
    assert ok
    path.write_bytes(buf.tobytes())


def _read(path: Path) -> np.ndarray:
    return cv2.imread(str(path), cv2.IMREAD_UNCHANGED)


def _tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _good_tree(src: Path) -> dict[str, tuple[int, int]]:
    """Real images of the kinds the local run handles (nested, gray, alpha, 16-bit), plus broken files."""
    rgb = np.ascontiguousarray(data.astronaut()[::8, ::8, ::-1])  # 64x64 BGR
    gray = data.camera()[::8, ::8]
    rgba = np.dstack([rgb[:40, :60], np.full((40, 60), 200, np.uint8)])
    good = {"astronaut.png": rgb, "coffee.jpg": np.ascontiguousarray(data.coffee()[::10, ::10, ::-1]),
            "nested/deeper/chelsea.bmp": rgb[:50, :60], "nested/gray.png": gray, "nested/rgba.png": rgba,
            "rocket16.png": (rgb[:34, :56].astype(np.uint16) * 257)}
    for rel, px in good.items():
        _write(src / rel, px)
    (src / "bad.png").write_bytes(b"not a png at all")
    (src / "nested" / "empty.jpg").write_bytes(b"")
    (src / "notes.txt").write_text("not an image")
    return {rel: px.shape[:2] for rel, px in good.items()}


def _summary(path: Path) -> dict:
    return json.loads(path.read_text())


@in_namespace
def test_ray_run_equals_local_run_and_resumes(tmp_path):
    src, cache = tmp_path / "in", tmp_path / "cache"  # a fresh cache: the driver's one export is observable
    good = _good_tree(src)
    common = ["--backend", "ort", "--threads", "1", "--scale", "2.5", "--tile", "24"]
    rc, err = ray_sr([str(src), str(tmp_path / "ray"), "--ray", "--ray-actors", "2", "--summary",
                      str(tmp_path / "ray.json"), *common], cache)
    assert rc == 1, err  # two bad files: the rest done, exit 1
    assert err.count("exporting srcnn") == 1  # made once, on the driver
    assert not [ln for ln in err.splitlines() if RAY_LINE.match(ln.encode())], err  # Ray's C++ lines stay in its logs
    lines = [ln for ln in err.splitlines() if ln.startswith("failed ")]
    assert sorted(lines) == ["failed bad.png: not a readable image: not a PNG, JPEG, BMP, TIFF or WebP file "
                             "(unrecognised header)", "failed nested/empty.jpg: empty file"]
    # the local run's closing lines, word for word (console.done_line / failed_line; issue 29 item 12)
    done = [ln for ln in err.splitlines() if ln.startswith("done: ")]
    assert len(done) == 1 and re.fullmatch(r"done: 6 ok, 2 failed, 0 skipped in \d+\.\d s: \S+ images/s, \S+ MPix/s "
                                           r"output over the whole run \(setup \d+\.\d s, then \S+ images/s\)",
                                           done[0]), done
    assert "2 images failed: " in err, err
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SRDEPLOY_CACHE", str(cache))
        assert main(["sr", str(src), str(tmp_path / "local"), "--quiet", "--summary", str(tmp_path / "local.json"),
                     *common]) == 1
    assert _tree(tmp_path / "ray") == _tree(tmp_path / "local") == sorted(good)  # tree mirrored, nothing else
    for rel, (h, w) in good.items():
        a, b = _read(tmp_path / "ray" / rel), _read(tmp_path / "local" / rel)
        assert a.shape[:2] == output_size(h, w, 2.5) and a.dtype == b.dtype
        assert np.abs(a.astype(np.int64) - b.astype(np.int64)).max() <= 1, rel
    ray, local = _summary(tmp_path / "ray.json"), _summary(tmp_path / "local.json")
    assert ray["counts"] == local["counts"] == {"ok": 6, "failed": 2, "skipped": 0, "ignored": 1}
    assert sorted(f["input"] for f in ray["failures"]) == sorted(f["input"] for f in local["failures"])
    by_rel = {r["input"]: r for r in ray["images"]}
    assert sorted(by_rel) == sorted(r["input"] for r in local["images"])
    assert by_rel["astronaut.png"]["tiles"] > 1  # tiled inside the actor
    assert set(ray) == set(local) and (ray["executor"]["name"], local["executor"]["name"]) == ("ray", "local")
    local_by_rel = {r["input"]: r for r in local["images"]}
    assert all(set(r) == set(local_by_rel[r["input"]]) for r in ray["images"])  # each record the local one's keys
    assert ray["executor"]["artifacts"][0]["file"].startswith("onnx/srcnn-fp32-custom")
    shared = cache / ray["executor"]["artifacts"][0]["file"]
    assert ray["executor"]["artifacts"][0]["sha256"] == __import__("hashlib").sha256(shared.read_bytes()).hexdigest()

    mtimes = {rel: (tmp_path / "ray" / rel).stat().st_mtime_ns for rel in good}
    # resumed on `auto` (the two bad files fail whichever backend): the first line says why in a few words, as a
    # local run's, and Ray Data's advice about fewer inputs than actors stays off the terminal (issue 51)
    rc, err = ray_sr([str(src), str(tmp_path / "ray"), "--ray", "--skip-existing", "--quiet", "--summary",
                      str(tmp_path / "again.json"), *common[2:]], cache)
    again = _summary(tmp_path / "again.json")
    assert rc == 1 and again["counts"] == {"ok": 0, "failed": 2, "skipped": 6, "ignored": 1}
    first = err.splitlines()[0]
    assert re.search(r"backend \S+: auto: [\w ,]+\); 8 images -> ", first), first  # not auto's whole reason
    assert "Warning" not in err and "concurrent actors" not in err, err
    assert {rel: (tmp_path / "ray" / rel).stat().st_mtime_ns for rel in good} == mtimes


# A user's net (a `package.module:factory`) that SIGKILLs the process running it on its third image, once per
# test (the first process to create the marker file): an actor dies mid-run, deterministically, with its queued
# batches in flight. The driver's receptive-field probes run on 48x48 inputs, never on the 40x40 images.
CRASHING_NET = """
import os, signal, torch

class CrashingNet(torch.nn.Module):
    scale = 2

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 12, 3, padding=1)
        self.images = 0

    def forward(self, x):
        if x.shape[-1] == 40:
            self.images += 1
            if self.images == 3:
                try:
                    os.close(os.open(os.environ["CRASH_MARKER"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    pass
                else:
                    os.kill(os.getpid(), signal.SIGKILL)
        return torch.nn.functional.pixel_shuffle(self.conv(x), 2)

def factory():
    return CrashingNet().eval()
"""


@in_namespace
def test_killed_actor_loses_no_image(tmp_path, cache):
    src, out, marker = tmp_path / "in", tmp_path / "out", tmp_path / "killed"
    (tmp_path / "crashing_net.py").write_text(CRASHING_NET)
    rng = np.random.default_rng(1)
    names = [f"part{i % 3}/img{i:02d}.png" for i in range(24)]
    for rel in names:
        _write(src / rel, rng.integers(0, 256, (40, 40, 3), dtype=np.uint8))
    args = [str(src), str(out), "--ray", "--ray-actors", "2", "--model", "crashing_net:factory", "--backend",
            "torch", "--scale", "2", "--threads", "1", "--quiet", "--summary", str(tmp_path / "run.json")]
    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}", "CRASH_MARKER": str(marker)}
    rc, err = _finish(_start(args, cache, env))
    assert marker.exists(), f"no actor was killed mid-run (rc {rc}): {err[-2000:]}"
    assert rc == 0, err[-2000:]
    summary = _summary(tmp_path / "run.json")
    assert summary["counts"]["ok"] == len(names) and summary["counts"]["failed"] == 0
    assert _tree(out) == sorted(names)  # every image, and no temp file of the killed writer
    for rel in names:
        img = _read(out / rel)
        assert img is not None and img.shape == (80, 80, 3), rel  # complete, decodable files
    rc, err = _finish(_start([*args[:-1], str(tmp_path / "again.json"), "--skip-existing"], cache, env))
    assert rc == 0, err[-2000:]
    assert _summary(tmp_path / "again.json")["counts"] == {"ok": 0, "failed": 0, "skipped": len(names), "ignored": 0}
    assert " on Ray (not started: nothing left to do); 24 images -> " in err, err  # no cluster for nothing


@in_namespace
@pytest.mark.slow
def test_driver_memory_stays_bounded_over_10000_images(tmp_path, cache):
    import psutil

    n = 10_000
    src, out = tmp_path / "in", tmp_path / "out"
    rng = np.random.default_rng(0)
    for i in range(n):  # 16x16 -> 32x32x3: each result is 3 KiB, so holding them all would add ~30 MB
        _write(src / f"d{i // 500:02d}" / f"{i:05d}.png", rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))
    proc = _start([str(src), str(out), "--ray", "--ray-actors", "2", "--backend", "ort", "--scale", "2", "--quiet"],
                  cache)
    driver = psutil.Process(proc.pid)
    samples = []  # (outputs written, driver RSS)
    while proc.poll() is None:
        try:
            rss = driver.memory_info().rss
        except psutil.Error:
            break
        samples.append((sum(len(files) for _, _, files in os.walk(out)) if out.exists() else 0, rss))
        time.sleep(0.5)
    rc, err = _finish(proc)
    assert rc == 0, err[-2000:]
    assert sum(len(files) for _, _, files in os.walk(out)) == n
    during = [(done, rss) for done, rss in samples if n // 10 <= done < n]
    assert len(during) >= 3, f"too few samples while images streamed: {samples[-10:]}"
    growth = max(rss for _, rss in during) - during[0][1]
    # Streaming: measured +1.6 MiB over ~8,900 images; keeping every record (not even the images) gave +17 MiB.
    assert growth < 8 * 2**20, f"driver RSS grew {growth / 2**20:.1f} MiB over {during[-1][0] - during[0][0]} images"


@in_namespace
@pytest.mark.parametrize("args, msg", [
    (["--ray", "--ray-actors", "0"], "--ray-actors must be at least 1"),
    (["--ray", "--backend", "nope"], "unknown backend 'nope'"),
    (["--ray", "--scale", "99"], "out of range"),
])
def test_bad_arguments_fail_before_ray_starts(tmp_path, cache, args, msg):
    src = tmp_path / "in"
    _write(src / "a.png", np.zeros((8, 8, 3), np.uint8))
    t0 = time.monotonic()
    rc, err = ray_sr([str(src), str(tmp_path / "out"), *args], cache)
    assert rc == 2 and err.startswith("error: ") and msg in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()
    assert time.monotonic() - t0 < 60  # no cluster was started


def test_ray_actors_without_ray_is_refused(tmp_path, capsys):
    assert main(["sr", str(tmp_path), str(tmp_path / "out"), "--ray-actors", "2"]) == 2
    assert "--ray-actors applies only to --ray runs" in capsys.readouterr().err


class _Store:
    """Stands in for Ray's object store (put/get of bytes) so sharing is tested across two caches, as two
    nodes would have, without a cluster."""

    def __init__(self):
        self.blobs = {}

    def put(self, blob: bytes) -> int:
        self.blobs[len(self.blobs)] = blob
        return len(self.blobs) - 1

    def get(self, ref: int) -> bytes:
        return self.blobs[ref]


def test_files_made_once_on_the_driver_are_cached_on_each_node(tmp_path, monkeypatch):
    from pipeline import backends
    from pipeline.artifacts.onnx_file import folded_variants
    from pipeline.cluster import artifacts

    store, logs = _Store(), []
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "driver"))
    choice = backends.choose(backends.BackendRequest("ort-folded", threads=1), "srcnn", log=logs.append)
    shared = artifacts.prepare(store, choice)
    assert sum("exporting srcnn" in m for m in logs) == 1
    onnx_rel = shared.files[0].rel
    assert Path(onnx_rel).name.startswith("srcnn-fp32-custom-dynamo")
    folded = folded_variants(tmp_path / "driver" / onnx_rel)
    assert 3 in folded and {f.name for f in folded.values()} <= {Path(f.rel).name for f in shared.files}
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "node"))  # another node: its own, empty cache
    assert artifacts.materialize(store, shared) == choice  # nothing given: the choice needs no other paths
    for f in shared.files:
        assert (tmp_path / "node" / f.rel).read_bytes() == (tmp_path / "driver" / f.rel).read_bytes()
    inodes = {f.rel: (tmp_path / "node" / f.rel).stat().st_ino for f in shared.files}
    backend = backends.load(choice)
    y = backend.infer(np.zeros((1, 3, 20, 20), np.float32), 3.0)
    assert y.shape == (1, 3, 60, 60) and backend.last_path.startswith("folded")  # the shared folded graph ran
    assert {f.rel: (tmp_path / "node" / f.rel).stat().st_ino for f in shared.files} == inodes  # not re-exported
    assert sorted((tmp_path / "node" / "onnx").iterdir()) == sorted(tmp_path / "node" / f.rel for f in shared.files)

    given = tmp_path / "driver" / onnx_rel
    user = artifacts.prepare(store, backends.choose(backends.BackendRequest("ort-folded", onnx=given), None))
    onnx = Path(dict(artifacts.materialize(store, user).options)["onnx"])
    assert onnx.read_bytes() == given.read_bytes() and onnx.name == given.name and onnx != given
    assert folded_variants(onnx)[3].read_bytes() == folded[3].read_bytes()  # siblings came along


@in_namespace
def test_ray_runs_a_lower_precision_as_the_local_run(tmp_path, cache):
    """openvino int8 (any x86 CPU): the driver makes the Q/DQ files once, the actors run exactly those."""
    src = tmp_path / "in"
    rng = np.random.default_rng(5)
    sizes = {"big.png": (40, 48), "small.png": (9, 11), "more.png": (36, 30)}  # small: the model's own graph
    for rel, (h, w) in sizes.items():
        _write(src / rel, rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    common = ["--model", "srcnn-x3", "--backend", "openvino", "--precision", "int8", "--threads", "1"]
    rc, err = ray_sr([str(src), str(tmp_path / "ray"), "--ray", "--ray-actors", "2", "--summary",
                      str(tmp_path / "ray.json"), *common], cache)
    assert rc == 0, err[-3000:]
    first = next(ln for ln in err.splitlines() if ln.startswith("sr: "))
    assert "backend openvino int8: requested" in first, first
    ray = _summary(tmp_path / "ray.json")
    assert ray["counts"]["ok"] == 3 and "int8" in ray["backend"] and ";" not in ray["backend"], ray["backend"]
    assert sum(a["file"].startswith("int8/") and a["file"].endswith(".onnx") for a in ray["executor"]["artifacts"]) == 2
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SRDEPLOY_CACHE", str(cache))
        assert main(["sr", str(src), str(tmp_path / "local"), "--quiet", *common]) == 0
    for rel, (h, w) in sizes.items():
        a, b = _read(tmp_path / "ray" / rel), _read(tmp_path / "local" / rel)
        assert a.shape == b.shape == (3 * h, 3 * w, 3)
        assert np.abs(a.astype(np.int64) - b.astype(np.int64)).max() <= 1, rel


def test_ray_log_lines_are_dropped_and_the_rest_passes_as_it_comes():
    e = (b"[2026-11-23 23:07:41,285 E 12570 12570] core_worker.cc:2465: Actor with class name: 'MapWorker' has "
         b"constructor arguments in the object store and max_restarts > 0.\n")
    w = b"[2026-11-23 23:07:38,823 W 1 1] network_util.cc:330: Failed to determine local IP\n"
    assert keep(b"sr: srcnn x3 on Ray\n" + e + w + b"done: 4 ok\n") == (b"sr: srcnn x3 on Ray\ndone: 4 ok\n", b"")
    assert keep(b"\r 40%|####  | 2/5") == (b"\r 40%|####  | 2/5", b"")  # a progress bar's update, at once
    assert keep(e[:30]) == (b"", e[:30])  # may be Ray's: held until its line ends
    assert keep(b"[not ray] our own line\n") == (b"[not ray] our own line\n", b"")
    fatal = b"[2026-11-23 23:07:41,285 F 1 1] raylet.cc:1: check failed\n"
    assert keep(fatal) == (fatal, b"")  # a fatal one is shown


def test_disconnect_kills_what_a_stopped_cluster_leaves():
    """disconnect() reaps the local cluster's processes that outlive ray.shutdown(): here a real child whose command
    line names Ray and that ignores SIGTERM, as an orphaned actor worker did (1 GB held after its test); a child
    that is not Ray's is never counted."""
    from pipeline.cluster.connect import ray_descendants, reap

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(120)"
    ours = subprocess.Popen([sys.executable, "-c", code, "ray::LeftoverWorker"], stdout=subprocess.PIPE)
    other = subprocess.Popen([sys.executable, "-c", code, "an-encoder"], stdout=subprocess.PIPE)
    try:
        ours.stdout.readline(), other.stdout.readline()  # both ignore SIGTERM from here on
        found = {p.pid: p for p in ray_descendants()}
        assert ours.pid in found and other.pid not in found
        killed = reap([found[ours.pid]], grace=0.5)
        assert [p.pid for p in killed] == [ours.pid] and killed[0].returncode == -signal.SIGKILL  # reaped by psutil
        assert other.poll() is None
    finally:
        for child in (ours, other):
            child.kill()
            child.wait(timeout=10)
