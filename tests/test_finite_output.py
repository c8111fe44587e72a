"""Every output checked before it is written (issue 48 item 1, pipeline.sr.runner.finite): a model whose output is NaN
on some content fails that image with one line at fp32 and writes the rest; an fp16 file that really overflows on
ONNX Runtime's CPU provider has its affected tiles re-run at fp32, counted in the record, --summary and the report;
the check gives the same counts on every conversion path (numpy, torch, the ONNX pixel graph)."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline.backends import pixels as px
from pipeline.cli import main as cli_main
from pipeline.sr.runner.records import Record

NAN_MODEL = "byom_nets:nan_near_white_factory"
FP16_MODEL = "byom_nets:fp16_overflow_factory"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A plain image (no white sample), one with white patches, a gray one with a white patch."""
    d = tmp_path_factory.mktemp("finite-in")
    plain = np.random.default_rng(0).integers(0, 200, (40, 48, 3)).astype(np.uint8)
    white = plain.copy()
    white[5:15, 5:20] = 255
    white[30:35, 40:46] = 255
    gray = plain[..., 0].copy()
    gray[20:30, 10:20] = 255
    for name, img in (("plain.png", plain), ("white.png", white), ("gray.png", gray)):
        cv2.imwrite(str(d / name), img)
    return d


@pytest.mark.parametrize("backend", ["ort", "openvino"])
def test_fp32_nan_fails_that_image_with_one_line_and_writes_the_rest(backend, folder, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli_main(["sr", str(folder), str(out), "--model", NAN_MODEL, "--backend", backend, "--tile", "16",
                     "--summary", str(tmp_path / "s.json")])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert (out / "plain.png").is_file() and not (out / "white.png").exists() and not (out / "gray.png").exists()
    line = next(ln for ln in err.splitlines() if ln.startswith("failed white.png"))
    assert f"{backend} fp32 output is not finite (NaN or inf)" in line and "pixel(s) in tile " in line
    assert "nothing written" in line
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["counts"]["ok"] == 1 and summary["counts"]["failed"] == 2 and "rerun_fp32" not in summary


@pytest.mark.parametrize("backend", ["ort", "torch", "openvino"])
def test_every_backend_counts_the_same_nonfinite_pixels_as_the_model_makes(backend, folder, tmp_path, capsys):
    """The NaN model is x2 nearest: each input pixel with a white sample makes 4 NaN output pixels, on every
    backend (OpenVINO's resize to its own size had spread each NaN to its neighbours' taps: 954 for 720)."""
    img = cv2.imread(str(folder / "white.png"))
    expected = 4 * int((img == 255).any(axis=2).sum())
    code = cli_main(["sr", str(folder / "white.png"), str(tmp_path / "out.png"), "--model", NAN_MODEL, "--backend",
                     backend])
    line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("failed white.png"))
    assert code == 1 and f"not finite (NaN or inf): {expected} pixel(s) in the whole image" in line, line


def test_fp32_nan_on_openvino_streams_fails_that_image_and_writes_the_rest(folder, tmp_path, capsys):
    """Whole images of a folder run two at a time on OpenVINO's streams: their outputs are checked all the same."""
    out = tmp_path / "out"
    code = cli_main(["sr", str(folder), str(out), "--model", NAN_MODEL, "--backend", "openvino", "--threads", "2",
                     "--verbose"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "2 inference streams" in err
    assert (out / "plain.png").is_file() and not (out / "white.png").exists()
    line = next(ln for ln in err.splitlines() if ln.startswith("failed white.png"))
    assert "openvino fp32 output is not finite (NaN or inf)" in line and "the whole image" in line


def test_fp16_overflow_on_ort_cpu_reruns_affected_tiles_at_fp32(folder, tmp_path, capsys):
    from pipeline.backends.ort_backend import OrtCpuBackend

    # the fp16 file really overflows on ORT's CPU provider (its export check let it through: it was written)
    be = OrtCpuBackend(FP16_MODEL, "fp16").load()
    x = np.full((1, 3, 8, 8), 200 / 255, np.float32)
    assert np.isfinite(be.infer(x, 2.0)).all()
    x[..., 2:4, 2:4] = 1.0
    assert np.isinf(be.infer(x, 2.0)).sum() == 3 * 4 * 4
    assert np.isfinite(OrtCpuBackend(FP16_MODEL, "fp32").load().infer(x, 2.0)).all()

    runs = {}
    for precision, tile in (("fp32", "16"), ("fp16", "16"), ("fp16", "0")):  # tiled, and whole images (batch path)
        out = tmp_path / f"{precision}-{tile}"
        code = cli_main(["sr", str(folder), str(out), "--model", FP16_MODEL, "--backend", "ort", "--precision",
                         precision, "--tile", tile, "--summary", str(out) + ".json"])
        runs[(precision, tile)] = (code, capsys.readouterr().err, json.loads(Path(str(out) + ".json").read_text()), out)
    for key, (code, err, _summary, out) in runs.items():
        assert code == 0 and "Traceback" not in err
        for name in ("plain.png", "white.png", "gray.png"):  # the re-run tiles give fp32's bytes
            assert np.array_equal(cv2.imread(str(out / name), cv2.IMREAD_UNCHANGED),
                                  cv2.imread(str(runs[("fp32", "16")][3] / name), cv2.IMREAD_UNCHANGED)), (key, name)
    assert "rerun_fp32" not in runs[("fp32", "16")][2]
    code, err, summary, _ = runs[("fp16", "16")]
    per_image = {r["input"]: r.get("rerun_fp32") for r in summary["images"]}
    assert per_image["plain.png"] is None
    assert per_image["white.png"]["tiles"] >= 2 and per_image["gray.png"]["tiles"] >= 1
    assert per_image["white.png"]["reason"] == "non-finite fp16 output"
    total = per_image["white.png"]["tiles"] + per_image["gray.png"]["tiles"]
    assert summary["rerun_fp32"] == {"tiles": total, "inputs": 2, "reasons": ["non-finite fp16 output"]}
    assert f"{total} tiles of 2 inputs re-run at fp32: non-finite fp16 output" in err
    whole = runs[("fp16", "0")][2]
    assert whole["rerun_fp32"] == {"tiles": 2, "inputs": 2, "reasons": ["non-finite fp16 output"]}


def test_every_conversion_counts_the_same_pixels():
    """numpy (the host path), the ONNX pixel graph (what device providers run) and torch (what CUDA runs) count
    the same non-finite pixels per sample; a clean sample in the batch counts 0."""
    from pipeline.backends.ort_backend import OrtCpuBackend
    from pipeline.backends.torch_backend import TorchBackend

    pixels = np.random.default_rng(1).integers(0, 200, (2, 12, 14, 3)).astype(np.uint8)
    pixels[1, 3:6, 4:9] = 255
    be = OrtCpuBackend(NAN_MODEL).load()
    counts = {}
    for name, run in (("numpy", be.infer_pixels), ("onnx graph", be.infer_pixels_in_graph),
                      ("torch", TorchBackend(NAN_MODEL, device="cpu").load().infer_pixels)):
        with pytest.raises(px.NonFiniteOutput) as e:
            run(pixels, 2.0)
        counts[name] = e.value.counts.tolist()
        assert e.value.affected == [1] and e.value.samples.shape == (2, 24, 28, 3)
    assert counts["numpy"] == counts["onnx graph"] == counts["torch"] == [0, 3 * 5 * 4]


def test_nonfinite_pixels_finds_nan_and_both_infinities_and_ignores_huge_finite_values():
    y = np.zeros((3, 3, 4, 5), np.float32)
    assert px.nonfinite_pixels(y) is None
    y[0] = 3e38  # the fast sum overflows; the exact count says these are finite
    assert px.nonfinite_pixels(y) is None
    y[1, 0, 1, 1], y[1, 2, 1, 1], y[2, 1, 0, 0], y[2, 1, 3, 4] = np.nan, np.inf, -np.inf, np.nan
    assert px.nonfinite_pixels(y).tolist() == [0, 1, 2]


def test_record_carries_reruns_through_another_process():
    """A Ray actor's record (as_dict -> from_dict) keeps its re-run tiles and why."""

    from pipeline.sr.runner.jobs import Job

    job = Job(Path("a.png"), Path("b.png"), "a.png", "png")
    rec = Record(job, status="ok", rerun=3, rerun_reason="non-finite int8 output")
    back = Record.from_dict(rec.as_dict(), job)
    assert (back.rerun, back.rerun_reason) == (3, "non-finite int8 output")


@pytest.mark.gpu
def test_torch_fp16_overflow_on_cuda_reruns_at_fp32(folder, tmp_path):
    """torch fp16 on CUDA overflows for real (the whole net in half); the check runs on the device and the affected
    tiles come out as fp32's."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: torch fp16 on CUDA is what overflows here (the CPU has no fp16 torch path)")
    from pipeline.backends.torch_backend import TorchBackend

    be = TorchBackend(FP16_MODEL, "fp16", device="cuda").load()
    x = np.full((1, 8, 8, 3), 255, np.uint8)
    with pytest.raises(px.NonFiniteOutput):
        be.infer_pixels(x, 2.0)
    outs = {}
    for precision in ("fp32", "fp16"):
        out = tmp_path / precision
        assert cli_main(["sr", str(folder), str(out), "--model", FP16_MODEL, "--backend", "torch", "--precision",
                         precision, "--tile", "16", "--summary", str(out) + ".json"]) == 0
        outs[precision] = (out, json.loads(Path(str(out) + ".json").read_text()))
    assert outs["fp16"][1]["rerun_fp32"]["inputs"] == 2 and "rerun_fp32" not in outs["fp32"][1]
    for name in ("plain.png", "white.png", "gray.png"):
        assert np.array_equal(cv2.imread(str(outs["fp16"][0] / name), cv2.IMREAD_UNCHANGED),
                              cv2.imread(str(outs["fp32"][0] / name), cv2.IMREAD_UNCHANGED))


def _clip(path: Path) -> Path:
    """3 lossless frames (FFV1 BGR0), the middle one with a white patch."""
    import av

    with av.open(str(path), "w") as out:
        v = out.add_stream("ffv1", rate=10)
        v.width, v.height, v.pix_fmt = 32, 24, "bgr0"
        rng = np.random.default_rng(0)
        for i in range(3):
            a = rng.integers(0, 200, (24, 32, 3)).astype(np.uint8)
            if i == 1:
                a[4:10, 4:12] = 255
            for p in v.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                out.mux(p)
        for p in v.encode():
            out.mux(p)
    return path


def test_a_clip_reruns_its_frame_at_fp16_and_fails_whole_at_fp32(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    _clip(tmp_path / "in" / "c.mkv")
    code = cli_main(["sr", str(tmp_path / "in"), str(tmp_path / "o16"), "--model", FP16_MODEL, "--backend", "ort",
                     "--precision", "fp16", "--summary", str(tmp_path / "s.json")])
    assert code == 0 and "1 tile of 1 input re-run at fp32: non-finite fp16 output" in capsys.readouterr().err
    (clip,) = json.loads((tmp_path / "s.json").read_text())["images"]
    assert clip["rerun_fp32"] == {"tiles": 1, "reason": "non-finite fp16 output"}
    code = cli_main(["sr", str(tmp_path / "in"), str(tmp_path / "o32"), "--model", NAN_MODEL, "--backend", "ort"])
    err = capsys.readouterr().err
    # the failing frame named, 1-based, with its time (the middle of 3 frames at 10 fps); its white patch's pixels
    assert code == 1 and "Traceback" not in err
    assert ("failed c.mkv: frame 2 at 0.100 s: ort fp32 output is not finite (NaN or inf): 192 pixel(s) in the "
            "whole frame; the clip is not written") in err.splitlines()
    assert not (tmp_path / "o32" / "c.mkv").exists()


def test_an_fp16_only_file_has_no_fp32_twin_so_that_image_fails_saying_why(folder, tmp_path, capsys):
    from pipeline.backends.ort_backend import OrtCpuBackend

    fp16_file = OrtCpuBackend(FP16_MODEL, "fp16").load().onnx_file
    code = cli_main(["sr", str(folder), str(tmp_path / "o"), "--onnx", str(fp16_file), "--backend", "ort",
                     "--precision", "fp16"])
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if ln.startswith("failed white.png"))
    assert code == 1 and (tmp_path / "o" / "plain.png").is_file() and not (tmp_path / "o" / "white.png").exists()
    assert line.startswith("failed white.png: ort fp16 output is not finite (NaN or inf): ")
    assert "; no fp32 twin to re-run it (" in line and "is a fp16 graph but precision fp32 was requested" in line
