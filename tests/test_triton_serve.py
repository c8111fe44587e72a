"""A real Triton server (`python -m pipeline serve`, NVIDIA's tritonserver from the nvidia-pytriton wheel, Python
backend) serving the `sr` model of a repository `triton` wrote, with real images over HTTP and gRPC.

Every server runs in a private network namespace with only the loopback up (`unshare -n`); clients join it with
`nsenter -n`, so nothing but 127.0.0.1 is reachable. Servers are started with --stop-after, die with their
`serve` process, and are stopped at the end of each test or module. The Triton env (the unpacked wheel and the
Python backend's venv under .triton/) is made here when missing (`make triton-env`, cached); the tests skip, with
the reason, only where the wheel cannot be had or no namespace can be made."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from skimage import data

from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.images import imageio
from pipeline.serve import triton_env
from pipeline.sr import upscale
from tests.netns import namespace_problem
from tests.video_clips import (
    assert_same_frames,
    audio_of,
    h264_clip,
    open_gop_clip,
    repeated_pts_clip,
    stream_facts,
    vfr_clip,
)

pytest.importorskip("tritonclient.grpc", reason="tritonclient is not installed (pip install -e '.[cluster]')")
pytest.importorskip("tritonclient.http", reason="tritonclient's HTTP client is not installed (pip install -e "
                                              "'.[cluster]')")
ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 300   # every server stops by itself after this; every client run must end by then
HTTP, GRPC = "http://127.0.0.1:8000", "grpc://127.0.0.1:8001"


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def triton_ready():
    why = namespace_problem(("unshare", "nsenter", "ip"))
    if why:
        pytest.skip(why)
    try:
        triton_env.prepare(log=lambda m: None)
    except PipelineError as e:
        if "pip download" in str(e):
            pytest.skip(f"the nvidia-pytriton wheel cannot be had here: {e}")
        raise
    why = triton_env.problem()
    if why:
        pytest.skip(why)


class Served:
    """`python -m pipeline serve REPO` in its own network namespace."""

    def __init__(self, repo: Path):
        cmd = f"ip link set lo up && exec {sys.executable} -m pipeline serve {repo} --quiet --stop-after {LIMIT_S}"
        self.proc = subprocess.Popen(["unshare", "-n", "sh", "-c", cmd], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 120
        while not self.ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail("serve did not get ready:\n" + "".join(self.lines))

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("gRPC"):
                self.ready.set()

    def command(self, args: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.proc.pid), "-n", sys.executable, *args]

    def start_sr(self, args: list[str]) -> subprocess.Popen:
        return subprocess.Popen(self.command(["-m", "pipeline", "sr", *map(str, args)]), cwd=ROOT, env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def sr(self, args: list[str]) -> tuple[int, str]:
        return finish(self.start_sr(args))

    def python(self, code: str) -> str:
        p = subprocess.run(self.command(["-c", code]), cwd=ROOT, env=_env(), capture_output=True, text=True,
                           timeout=LIMIT_S)
        assert p.returncode == 0, p.stderr
        return p.stdout

    def server_pid(self) -> int:
        """tritonserver, the serve process's child."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return int(children[0])

    def stop(self, sig: signal.Signals | None = signal.SIGTERM) -> tuple[int, str]:
        """Signal serve (None: wait for it to end by itself) and wait; its exit code and output."""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"serve did not stop within 60 s ({sig or 'on its own'})")
        time.sleep(0.1)
        return self.proc.returncode, "".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"sr --triton did not end within {LIMIT_S} s")
    return proc.returncode, err


def _images(folder: Path, copies: int = 1) -> Path:
    """RGB PNG, JPEG in a subfolder, 16-bit, RGBA, gray, and one corrupt file."""
    base = np.ascontiguousarray(data.astronaut()[::4, ::4, ::-1])  # 128 x 128 BGR
    (folder / "sub").mkdir(parents=True)
    for i in range(copies):
        tag = f"{i:02d}" if copies > 1 else ""
        img = np.roll(base, 5 * i, axis=1)
        cv2.imwrite(str(folder / f"a{tag}.png"), img)
        cv2.imwrite(str(folder / "sub" / f"b{tag}.jpg"), img[:60, :90], [cv2.IMWRITE_JPEG_QUALITY, 90])
        cv2.imwrite(str(folder / f"c16{tag}.png"), img[:40, :50].astype(np.uint16) * 257)
        cv2.imwrite(str(folder / f"d{tag}.png"), cv2.cvtColor(img[:50, :70], cv2.COLOR_BGR2BGRA))
        cv2.imwrite(str(folder / f"e{tag}.png"), cv2.cvtColor(img[:33, :47], cv2.COLOR_BGR2GRAY))
    (folder / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4 + b"IEND")
    return folder


@pytest.fixture(scope="module")
def repo(tmp_path_factory, triton_ready) -> Path:
    r = tmp_path_factory.mktemp("triton") / "repo"
    assert main(["triton", "--model", "srcnn", "--backend", "ort", "--output", str(r)]) == 0
    return r


@pytest.fixture(scope="module")
def server(repo):
    s = Served(repo)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return _images(tmp_path_factory.mktemp("images") / "in")


def _local(repo: Path, src: Path, out: Path) -> Path:
    """The local run of the backend the sr model serves (ort on the repository's ONNX file)."""
    s = upscale(src, out, backend="ort", onnx=repo / "srcnn" / "1" / "model.onnx", progress=False, log=lambda m: None,
                summary=out.parent / "local.json")
    assert [r.job.rel for r in s.failed] == ["bad.png"]
    return out


@pytest.fixture(scope="module")
def local(repo, images, tmp_path_factory) -> Path:
    return _local(repo, images, tmp_path_factory.mktemp("local") / "out")


def _decode_error(data: bytes) -> str:
    """The reason the sr stage gives for these bytes (the server must give the same)."""
    with pytest.raises(imageio.ImageError) as e:
        imageio.decode(data)
    return str(e.value)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _assert_identical(out: Path, local: Path) -> None:
    got, want = _files(out), _files(local)
    assert sorted(got) == sorted(want)
    assert [k for k in want if got[k] != want[k]] == []


@pytest.mark.parametrize("url, concurrency", [(HTTP, 1), (GRPC, 3)])
def test_served_folder_is_identical_to_the_local_run(server, images, local, tmp_path, url, concurrency):
    out, summary = tmp_path / "out", tmp_path / "summary.json"
    rc, err = server.sr([images, out, "--triton", url, "--concurrency", concurrency, "--summary", summary, "--quiet"])
    assert rc == 1, err  # the corrupt file
    assert f"failed bad.png: {_decode_error((images / 'bad.png').read_bytes())}" in err
    _assert_identical(out, local)
    s = json.loads(summary.read_text())
    assert s["counts"] == {"ok": 5, "failed": 1, "skipped": 0, "ignored": 0}
    assert "ort (CPUExecutionProvider" in s["backend"] and s["workers"] == concurrency
    assert {r["input"]: r["out_size"] for r in s["images"] if r["status"] == "ok"}["a.png"] == [384, 384]
    local_summary = json.loads((local.parent / "local.json").read_text())  # one summary, whatever executed the run
    assert set(s) == set(local_summary) and s["executor"] == {"name": "triton", "url": url, "model": "sr",
                                                              "concurrency": concurrency}
    rc, err = server.sr([images, out, "--triton", url, "--skip-existing"])
    assert rc == 1 and "skipping 5 images whose output exists" in err  # resumable; the corrupt one fails again


@pytest.mark.parametrize("url, concurrency", [(GRPC, 3)])
def test_served_clips_and_images_equal_the_local_run(repo, server, tmp_path, url, concurrency):
    """Frames go to the served model as arrays (several in flight, answered in order); decoding and encoding stay
    here: FFV1 outputs decode to the local run's frames (count, pts, pixels), the audio once, the rotation kept."""
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    h264_clip(src / "clip.mkv")  # the clip: 10 s at 30 fps, B-frames, AAC, rotation (.mkv: FFV1 out)
    vfr_clip(src / "sub" / "vfr.mkv")
    open_gop_clip(src / "open_gop.mkv")
    repeated_pts_clip(src / "repeated.mkv")  # every 7th pts repeated: the same frames as the local run's
    cv2.imwrite(str(src / "a.png"), np.ascontiguousarray(data.astronaut()[::8, ::8, ::-1]))
    out, summary = tmp_path / "out", tmp_path / "summary.json"
    rc, err = server.sr([src, out, "--triton", url, "--concurrency", concurrency, "--summary", summary, "--quiet"])
    assert rc == 0, err
    local = tmp_path / "local" / "out"
    s_local = upscale(src, local, backend="ort", onnx=repo / "srcnn" / "1" / "model.onnx", progress=False,
                      log=lambda m: None, summary=local.parent / "local.json")
    assert s_local.counts["ok"] == 5
    for rel in ("clip.mkv", "sub/vfr.mkv", "open_gop.mkv", "repeated.mkv"):
        assert_same_frames(out / rel, local / rel, exact=True)
        assert stream_facts(out / rel) == stream_facts(local / rel)
    assert stream_facts(out / "clip.mkv")["rotation"] == 90
    assert np.array_equal(audio_of(out / "clip.mkv"), audio_of(local / "clip.mkv"))
    assert (out / "a.png").read_bytes() == (local / "a.png").read_bytes()
    s, ls = json.loads(summary.read_text()), json.loads((local.parent / "local.json").read_text())
    assert s["counts"] == ls["counts"] == {"ok": 5, "failed": 0, "skipped": 0, "ignored": 0}
    assert set(s) == set(ls) and s["executor"]["name"] == "triton"  # one summary, the same keys for a clip
    by_rel, local_by_rel = {r["input"]: r for r in s["images"]}, {r["input"]: r for r in ls["images"]}
    assert set(by_rel["clip.mkv"]) == set(local_by_rel["clip.mkv"]) and by_rel["clip.mkv"]["video"]["frames"] == 300
    assert set(by_rel["clip.mkv"]["video"]) == set(local_by_rel["clip.mkv"]["video"])


def test_bad_requests_get_errors_and_the_server_goes_on(server, local, tmp_path):
    """Straight tritonclient requests: corrupt bytes, a scale out of range, a wrong input; then an RGB array request
    still answers with the local run's pixels."""
    _images(tmp_path / "in")  # the same a.png as the module's folder
    src = tmp_path / "a.npy"
    np.save(src, np.ascontiguousarray(cv2.imread(str(tmp_path / "in" / "a.png"))[:, :, ::-1]))
    code = f"""
import json, numpy as np, tritonclient.http as th, tritonclient.grpc as tg
out = {{}}
for name, tc, addr in (("http", th, "127.0.0.1:8000"), ("grpc", tg, "127.0.0.1:8001")):
    c = tc.InferenceServerClient(addr)
    def ask(**tensors):
        inputs = []
        for k, v in tensors.items():
            t = tc.InferInput(k, list(v.shape), {{"O": "BYTES", "d": "FP64", "B": "UINT8"}}[v.dtype.char])
            t.set_data_from_numpy(v)
            inputs.append(t)
        try:
            r = c.infer("sr", inputs, outputs=[tc.InferRequestedOutput("output_u8"), tc.InferRequestedOutput("info")])
            return r.as_numpy("output_u8")
        except Exception as e:
            return "error: " + (e.message() if hasattr(e, "message") else str(e))
    res = {{"corrupt": ask(image_bytes=np.array([[b"\\x89PNG\\r\\n\\x1a\\nIEND junk"]], dtype=object)),
           "scale": ask(image_bytes=np.array([[open("{tmp_path}/in/a.png", "rb").read()]], dtype=object),
                        scale=np.array([[75.0]])),
           "none": ask(scale=np.array([[3.0]]))}}
    arr = ask(pixels_u8=np.load("{src}")[None])
    np.save("{tmp_path}/" + name + ".npy", arr)
    out[name] = {{k: v if isinstance(v, str) else "answered" for k, v in res.items()}}
    out[name]["live"] = bool(c.is_server_live())
print(json.dumps(out))
"""
    res = json.loads(server.python(code).strip().splitlines()[-1])
    for proto in ("http", "grpc"):
        r = res[proto]
        assert r["corrupt"] == "error: " + _decode_error(b"\x89PNG\r\n\x1a\nIEND junk"), r
        assert r["scale"].startswith("error:") and "75" in r["scale"], r
        assert r["none"].startswith("error:") and "exactly one of" in r["none"], r
        assert r["live"]
        got = np.load(tmp_path / f"{proto}.npy")[0][:, :, ::-1]  # RGB -> BGR as cv2 reads it
        assert np.array_equal(got, cv2.imread(str(local / "a.png")))


def test_a_malformed_request_fails_alone_in_its_batch(server, tmp_path):
    """Seven requests at once (the dynamic batcher gathers them): one `format` that is not UTF-8 fails alone with a
    line that names no server path; the six good ones are answered."""
    img = tmp_path / "a.png"
    cv2.imwrite(str(img), np.full((24, 24, 3), 120, np.uint8))
    code = f"""
import json, numpy as np, tritonclient.grpc as tg
from concurrent.futures import ThreadPoolExecutor
c = tg.InferenceServerClient("127.0.0.1:8001")
png = np.array([[open("{img}", "rb").read()]], dtype=object)
def ask(i):
    fmt = np.array([[b"\\xff\\xfe" if i == 3 else b"png"]], dtype=object)
    inputs = [tg.InferInput("image_bytes", [1, 1], "BYTES"), tg.InferInput("format", [1, 1], "BYTES")]
    inputs[0].set_data_from_numpy(png)
    inputs[1].set_data_from_numpy(fmt)
    try:
        c.infer("sr", inputs, outputs=[tg.InferRequestedOutput("output_bytes")])
        return str(i), "ok"
    except Exception as e:
        return str(i), e.message() if hasattr(e, "message") else repr(e)
with ThreadPoolExecutor(7) as pool:
    print(json.dumps(dict(pool.map(ask, range(7)))))
"""
    res = json.loads(server.python(code).strip().splitlines()[-1])
    assert res.pop("3") == "format is not UTF-8 text"
    assert res == {str(i): "ok" for i in (0, 1, 2, 4, 5, 6)}


def test_two_clients_at_once(server, images, local, tmp_path):
    procs = [server.start_sr([images, tmp_path / f"out{i}", "--triton", url, "--concurrency", "2", "--quiet"])
             for i, url in enumerate((HTTP, GRPC))]
    for p in procs:
        rc, err = finish(p)
        assert rc == 1 and "failed bad.png" in err, err
    for i in range(2):
        _assert_identical(tmp_path / f"out{i}", local)


def _live_in_group(pgid: int) -> list[int]:
    """Processes of a process group that are still running (a killed child of init may linger as a zombie)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


def test_server_killed_mid_run_then_resumed(repo, server, tmp_path):
    """The server dies while a folder is half done: one line, exit 1, no partial file; --skip-existing on a
    running server finishes the folder, identical to the local run."""
    src = _images(tmp_path / "in", copies=8)
    want = _local(repo, src, tmp_path / "local")
    out = tmp_path / "out"
    doomed = Served(repo)
    try:
        client = doomed.start_sr([src, out, "--triton", GRPC, "--concurrency", "1", "--quiet"])
        deadline = time.monotonic() + 60
        while not any(out.rglob("*.png")) and time.monotonic() < deadline and client.poll() is None:
            time.sleep(0.02)
        server_pid = doomed.server_pid()  # also its process group, where its Python-backend stubs live
        os.kill(server_pid, signal.SIGKILL)
        rc, err = finish(client)
        serve_rc, serve_out = doomed.stop(None)  # serve notices its server died and exits by itself
        assert not _live_in_group(server_pid), "serve left the dead server's Python-backend stubs running"
    finally:
        doomed.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 1, err
    assert lines[-1].startswith("error: the Triton server at grpc://127.0.0.1:8001 stopped answering"), err
    assert "--skip-existing" in lines[-1]
    assert serve_rc == 1 and "tritonserver exited by itself" in serve_out
    written = _files(out)
    assert not [k for k in written if k.endswith(".part")]
    assert 0 < len(written) < len(_files(want))
    assert all(written[k] == want_bytes for k, want_bytes in _files(want).items() if k in written)
    rc, err = server.sr([src, out, "--triton", HTTP, "--skip-existing", "--quiet"])
    assert rc == 1 and "failed bad.png" in err
    _assert_identical(out, want)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_cleanly(repo, triton_ready, sig):
    s = Served(repo)
    pid = s.server_pid()
    rc, out = s.stop(sig)
    assert rc == 0, out
    assert "stopped (tritonserver exit code 0)" in out
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
