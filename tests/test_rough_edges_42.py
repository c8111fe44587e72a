"""Issue 42's rough edges (fourth pass), each as a new user hit it: the faster backend for a precision, messages
that name the real cause, and lines that say what a run does."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline import backends
from pipeline.backends import BackendStatus, auto, no_gpu_line, pick_auto
from pipeline.backends.availability import NEEDS_GPU
from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.native.cuda_driver import gpu_visible

ROOT = Path(__file__).resolve().parent.parent
CPU_ONLY = not gpu_visible()[0]


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _image(path: Path, side: int = 24) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 255, (side, side, 3), dtype=np.uint8))
    return path


def _st(**ok) -> list[BackendStatus]:
    return [BackendStatus(n, ok.get(n.replace("-", "_"), False), "r") for n in backends.NAMES]


@pytest.fixture()
def measurement(session_cache):
    """Write a `backends --measure` record for srcnn at a precision; removed afterwards."""
    made = []

    def write(precision: str, ms: dict[str, float]) -> None:
        path = auto._measure_file("srcnn", precision)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"size": 256, "ms": ms, "when": "2026-11-25 22:00:00"}))
        made.append(path)

    yield write
    for path in made:
        path.unlink(missing_ok=True)


# -- item 2: the expected order of each precision includes openvino ---------------------------------------------

def test_expected_order_of_each_precision_includes_openvino():
    assert auto.expected_order("bf16", False) == ("openvino", "torch")
    assert auto.expected_order("bf16", True) == ("trt", "torch", "openvino")  # torch on the GPU, before the CPU
    for gpu in (False, True):
        assert auto.expected_order("int8", gpu)[-1] == "openvino"
    assert auto.expected_order("fp32", False) == ("ort-folded", "openvino", "ort", "ort-sr-kernels", "torch")
    assert auto.expected_order("fp32", True)[:4] == ("trt", "ort-trt", "ort-cuda", "torch")


@pytest.mark.skipif(not CPU_ONLY, reason="the CPU order applies on a machine without a CUDA GPU")
def test_auto_at_bf16_picks_openvino_before_torch_and_falls_back_with_the_reason():
    p = pick_auto("srcnn", "bf16", statuses=_st(torch=True, openvino=True))
    assert p.name == "openvino" and "expected fastest bf16 backend" in p.reason
    p = pick_auto("srcnn", "bf16", statuses=_st(torch=True))  # a CPU where OpenVINO cannot run bf16
    assert p.name == "torch" and "faster-ranked but unavailable: openvino" in p.reason
    assert pick_auto("srcnn", "int8", statuses=_st(openvino=True)).reason.startswith("openvino is the expected")


@pytest.mark.skipif(not CPU_ONLY, reason="no CUDA GPU: the GPU-only reasons are said once")
def test_no_backend_for_bf16_says_each_reason_once():
    why = "this CPU has no bf16 arithmetic (amx_bf16 or avx512_bf16)"
    statuses = [BackendStatus(n, False, why if n in ("torch", "openvino") else
                              NEEDS_GPU if n == "trt" else "runs fp32, fp16, not bf16") for n in backends.NAMES]
    with pytest.raises(PipelineError) as e:
        pick_auto("srcnn", "bf16", statuses=statuses)
    assert str(e.value) == f"no backend can run srcnn (bf16): torch, openvino: {why}; trt: {NEEDS_GPU}"


# -- item 18: a measurement within noise keeps the expected order, and says so -----------------------------------

@pytest.mark.skipif(not CPU_ONLY, reason="the CPU order applies on a machine without a CUDA GPU")
def test_a_measured_lead_within_noise_keeps_the_expected_pick(measurement):
    measurement("fp32", {"openvino": 66.0, "ort-folded": 69.0, "torch": 300.0})
    p = pick_auto("srcnn", "fp32", statuses=_st(openvino=True, ort_folded=True, torch=True))
    assert p.name == "ort-folded" and "within noise" in p.reason
    assert "openvino 66 ms, ort-folded 69 ms" in p.reason and "measured 2026-11-25 22:00:00" in p.reason
    measurement("fp32", {"openvino": 50.0, "ort-folded": 69.0})  # the latest measurement is what counts
    p = pick_auto("srcnn", "fp32", statuses=_st(openvino=True, ort_folded=True))
    assert p.name == "openvino" and p.reason.startswith("openvino is fastest measured on this machine")


# -- item 3: a known precision the backend does not run --------------------------------------------------------

@pytest.mark.parametrize(("backend", "precision"), [("ort", "int8"), ("ort-folded", "int8"), ("ort-folded", "bf16"),
                                                    ("ort", "bf16")])
def test_a_precision_the_backend_does_not_run_names_those_that_do(tmp_path, capsys, backend, precision):
    img = _image(tmp_path / "a.png")
    code, _, err = _run(capsys, "sr", img, tmp_path / "o.png", "--precision", precision, "--backend", backend)
    assert code == 2 and err.count("\n") == 1 and "unknown precision" not in err
    assert err.startswith(f"error: --backend {backend} does not run {precision} (it runs fp32")
    assert f"{precision} runs on " in err and "openvino" in err.split(f"{precision} runs on ")[1]
    assert not (tmp_path / "o.png").exists()


# -- item 13: no CUDA GPU, said once --------------------------------------------------------------------------

@pytest.mark.skipif(not CPU_ONLY, reason="a machine without a CUDA GPU")
def test_no_gpu_is_said_once_and_each_backend_gets_a_short_reason(capsys):
    code, out, _ = _run(capsys, "backends")
    assert code == 0
    line = no_gpu_line()
    assert line.startswith("no CUDA GPU visible") and out.count("no CUDA GPU") == 1 and line in out
    rows = {ln.split()[0]: ln for ln in out.splitlines()[3:] if ln.split() and ln.split()[0] in backends.NAMES}
    for name in ("trt", "ort-cuda", "ort-trt"):
        assert rows[name].endswith(f"no   {NEEDS_GPU}")
    assert all(len(r) < 160 for n, r in rows.items() if n != "ort-sr-kernels")  # that one names a path


# -- item 4: a folder that takes no files is "not writable" ---------------------------------------------------

@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_proc_is_named_not_writable_for_output_summary_and_cache(tmp_path, capsys, monkeypatch):
    img = _image(tmp_path / "a.png")
    why = "(/proc is not writable: a virtual file system that takes no new files)"
    code, _, err = _run(capsys, "sr", img, "/proc/out")
    assert code == 2 and err == f"error: OUTPUT /proc/out cannot be written {why}; nothing was done\n"
    code, _, err = _run(capsys, "sr", img, tmp_path / "o.png", "--summary", "/proc/s.json")
    assert code == 2 and why in err and "No such file" not in err
    monkeypatch.setenv("SRDEPLOY_CACHE", "/proc/c")
    code, _, err = _run(capsys, "sr", img, tmp_path / "o.png")
    assert code == 2 and err == f"error: SRDEPLOY_CACHE=/proc/c: /proc/c cannot be written {why}\n"
    assert not (tmp_path / "o.png").exists()


# -- items 5, 9, 10: options that do not go together -----------------------------------------------------------

def test_local_only_options_with_triton_read_as_english(tmp_path, capsys):
    img = _image(tmp_path / "a.png")
    code, _, err = _run(capsys, "sr", img, tmp_path / "o.png", "--triton", "http://127.0.0.1:1", "--tile", "64")
    assert code == 2 and err.startswith("error: --tile applies only to local runs; with --triton")
    code, _, err = _run(capsys, "sr", img, tmp_path / "o.png", "--triton", "http://127.0.0.1:1", "--tile", "64",
                        "--threads", "1")
    assert code == 2 and err.startswith("error: --threads, --tile apply only to local runs;")


def test_ray_before_the_positionals_says_why_output_went_missing(tmp_path, capsys):
    img = _image(tmp_path / "a.png")
    code, _, err = _run(capsys, "sr", "--ray", img, tmp_path / "o.png")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: the following arguments are required: output; --ray takes an optional ADDRESS")
    assert "put --ray after OUTPUT or write --ray=local" in err


def test_onnx_and_engine_together_are_a_conflict(tmp_path, capsys):
    img = _image(tmp_path / "a.png")
    code, _, err = _run(capsys, "sr", img, tmp_path / "o.png", "--onnx", tmp_path / "none.onnx", "--engine",
                        tmp_path / "none.engine")
    assert code == 2 and err == "error: --onnx and --engine both name the model file to run: give one of them\n"


# -- item 6: the first frame over the pixel limit says so -------------------------------------------------------

def test_a_first_frame_over_the_pixel_limit_names_the_limit(tmp_path, monkeypatch):
    from pipeline.sr.video import av_io as video_io
    from tests.video_clips import make_png_mov

    clip = make_png_mov(tmp_path / "big.mov", [(200, 200)] * 2)
    monkeypatch.setenv("SRDEPLOY_MAX_PIXELS", "10000")
    with pytest.raises(video_io.VideoError) as e:
        video_io.probe(clip)
    assert str(e.value) == ("cannot decode the first frame: Invalid argument (the decoder refuses a frame over the "
                            "pixel limit of 10,000 this way; SRDEPLOY_MAX_PIXELS raises it)")


# -- item 11: `models --model` takes our own names, and our weights as a checkpoint get the right advice -------

def test_models_describes_our_own_model_by_name(capsys):
    code, out, _ = _run(capsys, "models", "--model", "srcnn")
    assert code == 0 and out.startswith("srcnn: our model, SRCNN") and "--model srcnn --weights FILE" in out
    code, out, _ = _run(capsys, "models", "--model", "deform-srcnn", "--json")
    info = json.loads(out)
    assert code == 0 and info["registered"] and info["scales"] == "(1, 8]" and info["default_scale"] == 3.0


def test_our_weights_given_as_a_checkpoint_suggest_model_and_weights(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from models.spec import MODELS

    path = tmp_path / "mine.pt"
    torch.save(MODELS["srcnn"].build().state_dict(), path)
    code, out, err = _run(capsys, "models", "--model", path)
    assert code == 2 and not out and err.count("\n") == 1
    assert err == (f"error: {path} holds weights of our model srcnn / srcnn-x3, not a checkpoint of another "
                   f"architecture: use --model srcnn --weights {path}\n")
    assert "ESRGAN" not in err


# -- item 12: no reference matches: where the reasons are ----------------------------------------------------------

def test_reference_without_matches_points_at_summary_only_when_there_is_one(tmp_path, capsys):
    img = _image(tmp_path / "in" / "a.png")
    (tmp_path / "hr").mkdir()
    code, _, err = _run(capsys, "sr", img.parent, tmp_path / "out", "--reference", tmp_path / "hr", "--backend",
                        "ort", "--quiet")
    assert code == 0
    assert "reference: no image in" in err and "no scores (--summary FILE lists each image's reason)" in err
    code, _, err = _run(capsys, "sr", img.parent, tmp_path / "out2", "--reference", tmp_path / "hr", "--backend",
                        "ort", "--quiet", "--summary", tmp_path / "s.json")
    assert code == 0 and "no scores (per-image reasons are in the summary)" in err
    assert json.loads((tmp_path / "s.json").read_text())["images"][0]["reference"] == "missing"


# -- item 15: compare's plot holds each row against its own precision's tolerance --------------------------------

def test_compare_plot_bars_pass_under_their_own_precisions_line(tmp_path):
    from pipeline import report
    from pipeline.analysis.compare import error_stats, tolerance_ratio, verdict
    from pipeline.report.compare import error_bars

    ref = np.zeros((1, 3, 8, 8), np.float32) + 0.5
    rows = []
    for backend, prec, err, loss in (("ort", "fp32", 1e-6, None), ("bad", "fp32", 1e-2, None),
                                     ("ort", "fp16", 1e-3, None), ("openvino", "int8", 1e-2,
                                                                   {"psnr_loss_db": 0.05, "budget_db": 0.1,
                                                                    "within_budget": True})):
        s = error_stats(ref + err, ref)
        ratio, crit = tolerance_ratio(s, prec, loss=loss)
        assert verdict(s, prec, loss=loss) == (ratio <= 1.0, crit)
        rows.append({"backend": backend, "precision": prec, "scale": 3.0, "status": "pass" if ratio <= 1 else "fail",
                     "criterion": crit, "tolerance_ratio": ratio, **s})
    doc = {"kind": "compare", "environment": report.environment(),
           "models": [{"model": "m", "input_size": 8, "images": ["a"], "scales": [3.0], "reference": "torch",
                       "tolerances": {"fp32_max_abs": 1e-4, "fp16_psnr_db": 50.0, "rel_floor": 1e-3}, "rows": rows}]}
    bars = error_bars(doc)
    assert [s for _, _, s, _ in bars] == ["pass", "fail", "pass", "pass"]
    assert all((v <= 1.0) == (s == "pass") for _, v, s, _ in bars)
    assert rows[2]["max_abs"] > 1e-4  # the fp16 row passes although it sits above the fp32 line the old plot drew
    assert bars[3][1] == pytest.approx(0.5)
    paths = report.write_compare(doc, tmp_path)
    assert paths["error_png"].stat().st_size > 1000


# -- item 17: the first line says a precision other than fp32 -------------------------------------------------------

def test_first_line_names_a_precision_other_than_fp32(tmp_path, capsys):
    img = _image(tmp_path / "a.png")
    code, _, err = _run(capsys, "sr", img, tmp_path / "o.png", "--backend", "ort", "--precision", "fp16", "--quiet")
    first = [ln for ln in err.splitlines() if ln.startswith("sr: ")]  # after an export line on first use
    assert code == 0 and first[0].startswith("sr: srcnn x3 on ort fp16 (requested); 1 image -> ")
    code, _, err = _run(capsys, "sr", img, tmp_path / "p.png", "--backend", "ort", "--quiet")
    first = [ln for ln in err.splitlines() if ln.startswith("sr: ")]
    assert code == 0 and first[0].startswith("sr: srcnn x3 on ort (requested); 1 image -> ")


def test_the_precision_hint_quotes_a_later_measurement(measurement):
    from pipeline import quality
    from pipeline.backends import select

    loaded = backends.create("ort", "srcnn")
    store = select._pick_store("srcnn", "ort", 3.0, {"onnx": None, "weights": None})
    store.parent.mkdir(parents=True, exist_ok=True)
    fp32_sha = select.content_sha256(loaded.run_file(3.0))  # the pick timed the fp32 file that runs now
    pick = {"model": "srcnn", "request": "ort", "scale": 3.0, "machine": quality.machine(), "backend": "openvino",
            "precision": "int8", "ms": 23.0, "size": 256, "run_sha256": "0" * 64,
            "times": "openvino int8 23 ms, ort fp32 89 ms", "notes": [], "gain_kept": {"psnr_y": 0.95, "ssim_y": 0.92},
            "fp32_ms": 89.0, "fp32_sha256": fp32_sha, "when": "2026-11-20 10:00:00"}
    keeps = "keeps 95 % of the model's PSNR-Y gain over bicubic and 92 % of its SSIM-Y gain"
    try:
        store.write_text(json.dumps(pick))
        assert select.faster_line("srcnn", "ort", loaded).startswith(
            "hint: --precision auto runs openvino int8 here, 3.9x fp32's speed (23 against 89 ms at 256x256, "
            "measured 2026-11-20 10:00:00")
        assert select.faster_line("srcnn", "ort", loaded).endswith(f"), within its quality budget ({keeps})")
        measurement("fp32", {"ort": 66.0})  # `backends --measure` since: its number, and the pick's age
        assert select.faster_line("srcnn", "ort", loaded) == (
            "hint: --precision auto ran openvino int8 here in 23 ms at 256x256 (2026-11-20 10:00:00), within its "
            f"quality budget ({keeps}); `backends --measure` timed ort fp32 since: 66 ms (2026-11-25 22:00:00); "
            "--precision auto re-weighs them")
        for kept in (None, {"psnr_y": 0.95, "ssim_y": 0.85}):  # no share stated, or under the gain rule: no hint
            store.write_text(json.dumps({**pick, "gain_kept": kept}))
            assert select.faster_line("srcnn", "ort", loaded) is None
    finally:
        store.unlink()


# -- item 20: lines in order, advice only where it applies, errors before the slow imports -------------------------

def test_eval_with_no_scale_in_range_fails_before_pytorch_loads():
    import subprocess
    import sys

    code = ("import sys; from pipeline.cli import main; rc = main(['eval', '--scales', '10']); "
            "print(rc, 'torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.stdout.split() == ["2", "False"], r
    assert r.stderr == "error: scale 10 is out of range for model 'srcnn' (allowed: (1, 8])\n"


def test_an_over_budget_precision_auto_left_out_gets_no_advice():
    from pipeline import quality

    record = {"precision": "int8", "scale": 3.0, "psnr_loss_db": 0.18, "ssim_loss": 0.001, "images": 4,
              "fidelity_mean_db": 45.0, "fidelity_worst_db": 44.0, "psnr_fp32": 30.0, "psnr": 29.82,
              "psnr_bicubic": 28.0, "ssim_fp32": 0.87, "ssim": 0.869, "ssim_bicubic": 0.85}  # keeps 91 % and 95 %
    assert quality.loss_line(record).endswith("OVER its 0.1 dB budget: use fp32 for exact output")
    assert quality.loss_line(record, advice=False).endswith("(worst image 44.0, floor 38), OVER its 0.1 dB budget")
