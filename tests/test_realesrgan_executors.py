"""Real-ESRGAN animevideov3 (~1.3 MFLOP per input pixel) through the stages a user runs on a folder or a clip
(issue 66 item 2): `sr` on an H.264 clip, `preview` on a folder with an image and a clip, and the same folder run on
a Ray cluster (`--ray`) and through a Triton server (`--triton`), each writing what the local run writes.

Servers and clusters run in private network namespaces with only the loopback up (tests/netns.py), as
tests/test_ray.py and tests/test_triton_serve.py start them. Everything needs the weights `make setup` fetched
(`make weights`) and skips, saying so, without them; Ray, Triton and namespaces skip with their own reasons.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

import models.fetched as fetched
from models.registry import get_spec, load_model, run
from pipeline.cli import main
from pipeline.data.sample_images import load_rgb
from pipeline.sr import upscale
from pipeline.sr.video.yuv import to_bgr
from tests.caches import own_cache
from tests.netns import namespace_problem
from tests.video_clips import assert_same_frames, frames_of, make_clip

MODEL = "realesr-animevideov3"
REPO = Path(__file__).resolve().parents[1]
LIMIT_S = 300  # every Ray or served run ends by then, or the test fails and its processes are killed
W, H, FRAMES = 64, 48, 8


@pytest.fixture(scope="module", autouse=True)
def _env(tmp_path_factory, session_cache):
    """PyTorch on one thread (a shared 2-core machine) and a cache of the module's own that shares the session's
    ONNX exports: the one export of the net serves the local, Ray and Triton runs alike."""
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SRDEPLOY_CACHE", str(own_cache(tmp_path_factory, session_cache, "realesrgan-executors")))
        yield

pytestmark = pytest.mark.skipif(fetched.problem(MODEL) is not None, reason=str(fetched.problem(MODEL)))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A 48x64 crop of a held-out photo (PNG) and a 64x48 H.264 clip of 8 moving frames in .mkv (so the output is
    lossless FFV1: what is compared is the net's output, not a second encode)."""
    d = tmp_path_factory.mktemp("in")
    cv2.imwrite(str(d / "cat.png"), cv2.cvtColor(load_rgb("chelsea")[100:148, 150:214], cv2.COLOR_RGB2BGR))
    make_clip(d / "clip.mkv", "libx264", W, H, FRAMES, 24)
    return d


def _net_on(rgb: np.ndarray) -> np.ndarray:
    """PyTorch fp32's x4 output of one RGB uint8 frame, rounded to 8 bits as written."""
    x = torch.from_numpy(rgb.transpose(2, 0, 1)[None].astype(np.float32) / 255)
    with torch.no_grad():
        y = run(load_model(MODEL), get_spec(MODEL), x, 4.0)[0].numpy().transpose(1, 2, 0)
    return np.clip(np.round(y * 255), 0, 255).astype(np.uint8)


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


def test_sr_on_an_h264_clip_writes_the_nets_frames(folder, tmp_path):
    """The output has the clip's 8 frames at 4x, with their pts, each the net's own output on the input frame as
    sr decodes it (pipeline.sr.video.yuv.to_bgr: the untagged 64x48 clip is BT.601 limited range by its size).
    FFV1 is lossless, so what is left is the runtime's fp32 arithmetic against PyTorch's: a level where a value sits
    on a rounding edge. 50 dB is ~0.8 levels RMS (one level off on every pixel would be 48 dB); a wrong frame
    (another's, shifted, or the colours decoded with another matrix) scores under 35."""
    out = tmp_path / "out.mkv"
    assert main(["sr", str(folder / "clip.mkv"), str(out), "--model", MODEL, "--quiet"]) == 0
    got, src = frames_of(out), frames_of(folder / "clip.mkv")
    assert len(got) == len(src) == FRAMES
    assert [f.pts for f in got] == [f.pts for f in src]
    for g, s in zip(got, src, strict=True):
        assert (g.width, g.height) == (4 * W, 4 * H)
        decoded = np.ascontiguousarray(to_bgr(s, "ITU601", False, False, False)[..., ::-1])
        psnr = _psnr(g.to_ndarray(format="rgb24"), _net_on(decoded))
        assert psnr >= 50.0, psnr


def test_preview_on_a_folder_names_the_fidelity_rule_for_a_gan_model(folder, tmp_path, capsys):
    out = tmp_path / "preview"
    assert main(["preview", str(folder), "--model", MODEL, "--backends", "ort", "openvino", "--precisions", "fp32",
                 "--samples", "1", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "report.json").read_text())
    assert doc["job"]["images"] == 1 and doc["job"]["clips"] == 1 and doc["job"]["frames"] == FRAMES
    assert sorted((c["backend"], c["precision"]) for c in doc["candidates"]) == [("openvino", "fp32"),
                                                                                 ("ort", "fp32")]
    for c in doc["candidates"]:
        assert c["verdict"] in ("recommended", "within budget"), c
        assert 0 < c["est_seconds"] < math.inf and 0 < c["ms_per_mpix"] < math.inf and c["est_bytes"] > 0, c
    rule = doc["gate_rule"]
    assert "GAN model" in rule and "fidelity rule" in rule and "not PSNR against the originals" in rule
    assert rule in printed and rule in (out / "report.md").read_text(encoding="utf-8")
    assert f"recommended: python -m pipeline sr {folder} OUTPUT --model {MODEL} --backend " in printed


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _assert_same_output(out: Path, local: Path) -> None:
    """The same files; the image within 1 level (another process's ONNX Runtime), the clip's frames and pts."""
    assert _files(out) == _files(local) == ["cat.png", "clip.mkv"]
    a, b = cv2.imread(str(out / "cat.png")), cv2.imread(str(local / "cat.png"))
    assert a.shape == b.shape == (4 * H, 4 * W, 3)
    assert np.abs(a.astype(np.int16) - b.astype(np.int16)).max() <= 1
    assert_same_frames(out / "clip.mkv", local / "clip.mkv", exact=True)


def _local(folder: Path, out: Path, **kw) -> None:
    s = upscale(folder, out, progress=False, log=lambda m: None, **kw)
    assert s.counts["ok"] == 2 and not s.failed


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # its session: the driver and the cluster it started
        proc.communicate()
        pytest.fail(f"the run did not end within {LIMIT_S} s")
    return proc.returncode, err


def test_ray_writes_what_the_local_run_writes(folder, tmp_path):
    pytest.importorskip("ray.data", reason="Ray with Ray Data is not installed (pip install -e '.[cluster]')")
    if why := namespace_problem():
        pytest.skip(why)
    common = ["--model", MODEL, "--backend", "ort", "--threads", "1"]
    args = " ".join(["exec", sys.executable, "-m", "pipeline", "sr", str(folder), str(tmp_path / "ray"), "--ray",
                     "--ray-actors", "1", "--quiet", "--summary", str(tmp_path / "ray.json"), *common])
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(["unshare", "-n", "sh", "-c", f"ip link set lo up && {args}"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    rc, err = _finish(proc)
    assert rc == 0, err[-3000:]
    summary = json.loads((tmp_path / "ray.json").read_text())
    assert summary["executor"]["name"] == "ray" and summary["counts"]["ok"] == 2
    assert any(a["file"].endswith(".onnx") and MODEL in a["file"] for a in summary["executor"]["artifacts"])
    _local(folder, tmp_path / "local", model=MODEL, backend="ort", threads=1)
    _assert_same_output(tmp_path / "ray", tmp_path / "local")


def test_triton_writes_what_the_local_run_writes(folder, tmp_path):
    from tests.test_triton_serve import Served, finish, triton_env

    if why := namespace_problem(("unshare", "nsenter", "ip")):
        pytest.skip(why)
    if why := triton_env.problem():
        pytest.skip(f"{why} (make triton-env)")
    repo = tmp_path / "repo"
    assert main(["triton", "--model", MODEL, "--backend", "ort", "--output", str(repo)]) == 0
    server = Served(repo)
    try:
        rc, err = finish(server.start_sr([folder, tmp_path / "served", "--triton", "grpc://127.0.0.1:8001",
                                          "--quiet"]))
    finally:
        server.stop()
    assert rc == 0, err[-3000:]
    _local(folder, tmp_path / "local", backend="ort", onnx=repo / MODEL / "1" / "model.onnx")
    _assert_same_output(tmp_path / "served", tmp_path / "local")
