"""End to end: `python -m pipeline sr` on a folder of real skimage images plus odd and broken files,
for the torch and ONNX Runtime backends."""
import io
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image as PILImage
from skimage import data

from models.registry import get_spec, output_size
from pipeline.cli import main
from tests.caches import one_thread_own_cache

SCALE = 2.5


_env = one_thread_own_cache()


def _bgr(rgb):
    return np.ascontiguousarray(rgb[:, :, ::-1])


def _write(path: Path, pixels) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, buf = cv2.imencode(path.suffix, pixels)
    assert ok
    path.write_bytes(buf.tobytes())


GOOD = {  # relative path -> (height, width, channels, depth)
    "astronaut.png": (64, 64, 3, 8),
    "coffee.jpg": (40, 60, 3, 8),
    "nested/deeper/chelsea.bmp": (50, 75, 3, 8),
    "nested/camera_gray.png": (64, 64, 1, 8),
    "nested/rgba.png": (40, 60, 4, 8),
    "rocket16.png": (34, 56, 3, 16),
    "rocket16.tif": (34, 56, 1, 16),
    "tiny.png": (1, 1, 3, 8),
    "rotated.jpg": (46, 30, 3, 8),   # stored 30x46 with EXIF orientation 6 (rotate 90 CW)
    "same/a.png": (32, 32, 3, 8),
    "same/b.png": (32, 32, 3, 8),
    "same/c.png": (32, 32, 3, 8),
}
BAD = {"empty.png": "empty file", "notes.png": "not a readable image", "nested/truncated.jpg": "truncated JPEG",
       "cut.png": "truncated PNG"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("in")
    astro = data.astronaut()[::8, ::8]
    _write(root / "astronaut.png", _bgr(astro))
    _write(root / "coffee.jpg", _bgr(data.coffee()[::10, ::10]))
    _write(root / "nested/deeper/chelsea.bmp", _bgr(data.chelsea()[::6, ::6][:50, :75]))
    _write(root / "nested/camera_gray.png", data.camera()[::8, ::8])
    coffee = data.coffee()[::10, ::10]
    alpha = np.linspace(0, 255, coffee.shape[1]).astype(np.uint8)[None].repeat(coffee.shape[0], 0)
    alpha[10:20, 10:20] = 0
    _write(root / "nested/rgba.png", np.dstack([_bgr(coffee), alpha]))
    rocket = data.rocket()[::8, ::8][:34, :56]
    _write(root / "rocket16.png", _bgr(rocket).astype(np.uint16) * 257 + 100)
    _write(root / "rocket16.tif", cv2.cvtColor(_bgr(rocket), cv2.COLOR_BGR2GRAY).astype(np.uint16) * 257)
    _write(root / "tiny.png", np.array([[[30, 120, 220]]], np.uint8))
    im = PILImage.fromarray(data.chelsea()[::10, ::10][:30, :48])
    exif = im.getexif()
    exif[0x0112] = 6
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=95, exif=exif)
    (root / "rotated.jpg").write_bytes(buf.getvalue())
    for i, name in enumerate("abc"):
        _write(root / f"same/{name}.png", _bgr(data.astronaut()[i * 32:i * 32 + 32, 200:232]))
    # broken files
    (root / "empty.png").write_bytes(b"")
    (root / "notes.png").write_text("not an image")
    ok, jpg = cv2.imencode(".jpg", _bgr(astro))
    (root / "nested/truncated.jpg").write_bytes(jpg.tobytes()[: len(jpg) // 2])
    png = (root / "astronaut.png").read_bytes()
    (root / "cut.png").write_bytes(png[: len(png) // 2])
    (root / "README.txt").write_text("ignored: no image extension")
    return root


def _sr(capsys, *args):
    code = main(["sr", *map(str, args)])
    out = capsys.readouterr()
    return code, out.err


def _common(weights, *extra):
    w = ["--weights", weights] if weights else []
    return ["--model", "srcnn", "--scale", SCALE, "--threads", "1", "--quiet", *w, *extra]


@pytest.fixture(scope="module")
def torch_run(tree, weights, tmp_path_factory):
    out = tmp_path_factory.mktemp("out_torch")
    summary = out.parent / "torch_summary.json"
    code = main(["sr", str(tree), str(out), "--backend", "torch", "--summary", str(summary),
                 *map(str, _common(weights))])
    return code, out, json.loads(summary.read_text())


def _read(path):
    return cv2.imread(str(path), cv2.IMREAD_UNCHANGED)


def test_folder_outputs_sizes_depths_and_layout(torch_run):
    code, out, summary = torch_run
    assert code == 1  # some inputs were broken
    for rel, (h, w, c, depth) in GOOD.items():
        img = _read(out / rel)
        assert img is not None, rel
        oh, ow = output_size(h, w, SCALE)
        assert img.shape[:2] == (oh, ow), rel
        assert (1 if img.ndim == 2 else img.shape[2]) == c, rel
        assert img.dtype == (np.uint16 if depth == 16 else np.uint8), rel
    assert _read(out / "tiny.png").shape == (3, 3, 3)  # 1x1 at 2.5 -> round(2.5) = 3
    assert not (out / "README.txt").exists()
    assert summary["counts"] == {"ok": len(GOOD), "failed": len(BAD), "skipped": 0, "ignored": 1}
    assert summary["images_per_s"] > 0 and summary["mpix_per_s"] > 0
    by_name = {r["input"]: r for r in summary["images"]}
    r = by_name["nested/rgba.png"]
    assert r["status"] == "ok" and r["mode"] == "rgba" and r["out_size"] == [150, 100] and r["time_s"] > 0
    assert by_name["rocket16.png"]["bit_depth"] == 16


def test_broken_files_are_reported_and_the_rest_completes(torch_run, tree, weights, tmp_path, capsys):
    _, _, summary = torch_run
    failures = {f["input"]: f["reason"] for f in summary["failures"]}
    assert set(failures) == set(BAD)
    for rel, reason in BAD.items():
        assert reason in failures[rel]
    # one stderr line per failure, naming the file
    code, err = _sr(capsys, tree, tmp_path / "o", "--backend", "torch", *_common(weights))
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("failed ")]
    assert sorted(ln.split(":")[0][len("failed "):] for ln in lines) == sorted(BAD)
    for rel in BAD:
        assert not (tmp_path / "o" / rel).exists()


def _model(weights, chw):
    from models.registry import load_model, run

    net = load_model("srcnn", weights)
    with torch.inference_mode():
        return run(net, get_spec("srcnn"), torch.from_numpy(np.ascontiguousarray(chw))[None], SCALE)[0].numpy()


def test_alpha_is_bicubic_and_gray_stays_gray(torch_run, tree, weights):
    _, out, _ = torch_run
    src = _read(tree / "nested/rgba.png")
    got = _read(out / "nested/rgba.png")
    a = torch.from_numpy(src[:, :, 3].astype(np.float32) / 255)[None, None]
    exp = F.interpolate(a, size=got.shape[:2], mode="bicubic", align_corners=False)[0, 0].numpy()
    # each alpha sample is torch's bicubic value rounded, up to float noise: this linear ramp puts many
    # values on .5 boundaries, where OpenCV's and torch's summation orders (~1e-7 apart) round apart
    assert np.abs(got[:, :, 3] - np.clip(exp * 255, 0, 255)).max() <= 0.5 + 1e-3
    assert (got[30:45, 30:45, 3] == 0).all()  # the transparent square, scaled by 2.5
    # gray: the RGB model on the replicated channel, written back as BT.601 luma
    gray_in = _read(tree / "nested/camera_gray.png").astype(np.float32) / 255
    y = _model(weights, np.stack([gray_in] * 3))
    exp = np.clip(np.rint((0.299 * y[0] + 0.587 * y[1] + 0.114 * y[2]) * 255), 0, 255)
    gray = _read(out / "nested/camera_gray.png")
    assert gray.ndim == 2 and np.abs(gray.astype(int) - exp).max() <= 1


def test_exif_orientation_is_applied(torch_run):
    _, out, summary = torch_run
    img = _read(out / "rotated.jpg")
    assert img.shape[:2] == output_size(46, 30, SCALE)  # portrait, as displayed


def test_output_matches_whole_image_model(torch_run, tree, weights):
    """What is written is the model's float output, rounded and clipped once."""
    _, out, _ = torch_run
    src = _read(tree / "astronaut.png")[:, :, ::-1].astype(np.float32) / 255
    y = _model(weights, src.transpose(2, 0, 1))
    exp = np.clip(np.rint(y * 255), 0, 255).astype(np.uint8).transpose(1, 2, 0)[:, :, ::-1]
    got = _read(out / "astronaut.png")
    # equal up to a rare flip where the float output sits on a .5 boundary (conv algorithm noise ~1e-7)
    assert np.abs(got.astype(int) - exp).max() <= 1 and (got != exp).mean() < 0.001


def test_tiled_run_equals_untiled(tree, weights, tmp_path, capsys):
    args = _common(weights, "--backend", "torch")
    sel = tmp_path / "sel"
    for rel in ("astronaut.png", "rocket16.png", "nested/rgba.png"):
        (sel / rel).parent.mkdir(parents=True, exist_ok=True)
        (sel / rel).write_bytes((tree / rel).read_bytes())
    assert _sr(capsys, sel, tmp_path / "whole", "--tile", 0, *args)[0] == 0
    assert _sr(capsys, sel, tmp_path / "tiled", "--tile", 12, "--summary", tmp_path / "s.json", *args)[0] == 0
    tiles = {r["input"]: r["tiles"] for r in json.loads((tmp_path / "s.json").read_text())["images"]}
    assert min(tiles.values()) > 4
    for rel in tiles:  # exactly: 8-bit, 16-bit and alpha (tiles reproduce the whole image's floats bit for bit)
        assert np.array_equal(_read(tmp_path / "whole" / rel), _read(tmp_path / "tiled" / rel)), rel


def test_ort_backend_matches_torch(torch_run, tree, weights, tmp_path, capsys):
    _, torch_out, _ = torch_run
    sel = tmp_path / "sel"
    rels = ["astronaut.png", "nested/camera_gray.png", "nested/rgba.png", "rocket16.png", "tiny.png",
            "same/a.png", "same/b.png", "same/c.png"]
    for rel in rels:
        (sel / rel).parent.mkdir(parents=True, exist_ok=True)
        (sel / rel).write_bytes((tree / rel).read_bytes())
    code, err = _sr(capsys, sel, tmp_path / "ort", "--backend", "ort", "--batch", 3, "--tile", 20,
                    "--summary", tmp_path / "s.json", *_common(weights))
    assert code == 0, err
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["backend"].startswith("ort")
    for rel in rels:
        a, b = _read(torch_out / rel).astype(int), _read(tmp_path / "ort" / rel).astype(int)
        assert a.shape == b.shape
        tol = 257 * 2 if rel == "rocket16.png" else 2
        assert np.abs(a - b).max() <= tol, rel


def test_skip_existing_resumes(tree, weights, tmp_path, capsys):
    sel = tmp_path / "sel"
    for rel in ("astronaut.png", "coffee.jpg", "nested/camera_gray.png"):
        (sel / rel).parent.mkdir(parents=True, exist_ok=True)
        (sel / rel).write_bytes((tree / rel).read_bytes())
    out = tmp_path / "out"
    args = _common(weights, "--backend", "torch")
    assert _sr(capsys, sel, out, *args)[0] == 0
    (out / "coffee.jpg").unlink()
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.png")}
    assert _sr(capsys, sel, out, "--skip-existing", "--summary", tmp_path / "s.json", *args)[0] == 0
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["counts"]["ok"] == 1 and s["counts"]["skipped"] == 2
    assert (out / "coffee.jpg").is_file()
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.png")} == before
    assert not [p for p in out.rglob("*") if p.name.endswith(".part")]


def test_output_inside_input_is_refused_before_any_work(tree, weights, tmp_path, capsys):
    """`sr IN IN/sr` would leave results a later run over IN reads back as inputs: one line, exit 2, nothing
    written (issue 67)."""
    src = tmp_path / "photos"
    (src / "d").mkdir(parents=True)
    (src / "a.png").write_bytes((tree / "astronaut.png").read_bytes())
    (src / "d" / "b.png").write_bytes((tree / "same/a.png").read_bytes())
    originals = {p: p.read_bytes() for p in src.rglob("*.png")}
    code, err = _sr(capsys, src, src / "sr", *_common(weights, "--backend", "torch"))
    assert code == 2 and err.strip().startswith("error: OUTPUT ") and "lies inside the INPUT folder" in err
    assert {p: p.read_bytes() for p in src.rglob("*.png")} == originals and not (src / "sr").exists()


def test_single_file_format_and_collisions(tree, weights, tmp_path, capsys):
    args = _common(weights, "--backend", "torch")
    assert _sr(capsys, tree / "rocket16.png", tmp_path / "one.jpg", *args)[0] == 0
    img = _read(tmp_path / "one.jpg")
    assert img.dtype == np.uint8 and img.shape == (*output_size(34, 56, SCALE), 3)
    # the same stem in two formats cannot both become x.png
    src = tmp_path / "two"
    src.mkdir()
    (src / "x.png").write_bytes((tree / "same/a.png").read_bytes())
    (src / "x.jpg").write_bytes((tree / "coffee.jpg").read_bytes())
    code, err = _sr(capsys, src, tmp_path / "two_out", "--format", "png", *args)
    assert code == 1 and err.count("x.jpg and x.png would both write") == 1  # one line names the pair
    assert not (tmp_path / "two_out" / "x.png").exists()  # neither input's result takes the name


def test_reference_reports_psnr_ssim(tmp_path, weights, capsys):
    hr_dir, lr_dir = tmp_path / "hr", tmp_path / "lr"
    hr = _bgr(data.astronaut()[100:196, 150:246])  # 96x96, divisible by 3
    _write(hr_dir / "a.png", hr)
    _write(lr_dir / "a.png", cv2.resize(hr, (32, 32), interpolation=cv2.INTER_AREA))
    code, err = _sr(capsys, lr_dir, tmp_path / "out", "--backend", "torch", "--reference", hr_dir,
                    "--summary", tmp_path / "s.json", *[a if a != SCALE else 3 for a in _common(weights)])
    assert code == 0, err
    s = json.loads((tmp_path / "s.json").read_text())
    rec = s["images"][0]
    assert rec["out_size"] == [96, 96]
    for k in ("psnr", "ssim", "psnr_bicubic", "ssim_bicubic"):
        assert np.isfinite(rec[k]) and s["reference"][k] == pytest.approx(rec[k])
    assert 18 < rec["psnr_bicubic"] < 40 and 0 < rec["ssim_bicubic"] <= 1


@pytest.mark.parametrize("extra,needle", [
    (["--model", "nope"], "unknown model 'nope'"),
    (["--backend", "cuda-magic"], "unknown backend 'cuda-magic'"),
    (["--scale", "9"], "scale 9 is out of range"),
    (["--model", "srcnn-x3", "--scale", "2"], "out of range for model 'srcnn-x3'"),
    (["--backend", "trt", "--engine", "/nonexistent/srcnn.engine"], "TensorRT engine not found"),
    (["--format", "gif"], "unknown output format"),
])
def test_bad_arguments_fail_before_any_work(tree, tmp_path, capsys, extra, needle):
    out = tmp_path / "never"
    code, err = _sr(capsys, tree, out, "--quiet", *extra)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]
    assert not out.exists()


def test_trt_backend_without_gpu_fails_in_one_line(tree, tmp_path, capsys):
    code, err = _sr(capsys, tree, tmp_path / "never", "--backend", "trt", "--quiet")
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert not (tmp_path / "never").exists()


def test_missing_input_and_input_as_output(tree, tmp_path, capsys):
    code, err = _sr(capsys, tmp_path / "nothing", tmp_path / "o", "--quiet")
    assert code == 2 and "input not found" in err
    code, err = _sr(capsys, tree, tree, "--quiet")
    assert code == 2 and "inputs are never overwritten" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = _sr(capsys, empty, tmp_path / "o", "--quiet")
    assert code == 2 and "no images found" in err


def test_too_large_output_is_skipped_before_inference(tmp_path, weights, capsys):
    src = tmp_path / "wide"
    _write(src / "wide.png", np.full((1, 7000, 3), 128, np.uint8))   # x2.5 -> 17500 px: over WebP's 16383
    _write(src / "ok.png", np.full((4, 4, 3), 128, np.uint8))
    code, err = _sr(capsys, src, tmp_path / "o", "--format", "webp", "--backend", "torch", *_common(weights))
    assert code == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("failed ")]
    assert len(lines) == 1 and "wide.png" in lines[0] and "exceeds the webp limit" in lines[0]
    assert not (tmp_path / "o" / "wide.webp").exists() and (tmp_path / "o" / "ok.webp").is_file()


def test_backend_input_limit_is_respected(tree, weights, tmp_path, capsys):
    """Engines with bounded profiles (TensorRT) expose max_input_size(); every crop must fit it."""
    from pipeline import backends
    from pipeline.sr import upscale

    real = backends.create("torch", "srcnn", "fp32", **({"weights": weights} if weights else {}))
    seen = []

    from pipeline.backends.base import Backend

    class Bounded(Backend):  # the TensorRT backend's size contract around a real runner (no GPU here)
        name, device, precision, model_name, spec = "bounded", "cpu", "fp32", "srcnn", real.spec

        @classmethod
        def status(cls, spec, precision, **_):
            return cls.ok("a test's wrapper")

        def load(self):
            return self

        def max_input_size(self):
            return (100, 100)

        def infer(self, batch, scale):
            seen.append(batch.shape)
            assert batch.shape[2] <= 100 and batch.shape[3] <= 100
            return real.infer(batch, scale)

        def describe(self):
            return "bounded torch"

    sel = tmp_path / "sel"
    _write(sel / "a.png", _bgr(data.astronaut()[::4, ::4][:120, :110]))
    s = upscale(sel, tmp_path / "o", scale=SCALE, backend=Bounded(), progress=False)
    assert s.counts["ok"] == 1 and len(seen) > 1
    assert _sr(capsys, sel, tmp_path / "w", "--backend", "torch", "--tile", 0, *_common(weights))[0] == 0
    assert np.abs(_read(tmp_path / "o/a.png").astype(int) - _read(tmp_path / "w/a.png")).max() <= 1


@pytest.mark.parametrize("backend_name", ["torch", "ort", "ort-sr-kernels", "ort-folded"])
def test_backend_tiled_float_output_equals_whole_image(backend_name, weights):
    """Through the real runners: tiles with context, cropped, equal whole-image inference bit for bit, at an
    integer and a non-integer scale (sr::DynamicResize's exact source positions, models.ops.cubic_taps)."""
    from pipeline import backends
    from pipeline.images import tiling

    b = backends.create(backend_name, "srcnn", "fp32", threads=1, **({"weights": weights} if weights else {}))
    x = np.ascontiguousarray(data.astronaut()[::6, ::6][:70, :64].transpose(2, 0, 1)[None], np.float32) / 255
    for scale in (3, 2.5) if backend_name != "ort-folded" else (3,):  # folded graphs exist for integer scales
        whole = b.infer(x, scale)[0]
        plan = tiling.plan(70, 64, scale, 16, tiling.context_margin(get_spec("srcnn").receptive_radius, scale))
        assert plan.count >= 9 and plan.exact
        out = np.full_like(whole, np.nan)

        def write(t, y, out=out):
            sy, sx = t.keep_slices()
            out[:, t.y.keep0:t.y.keep1, t.x.keep0:t.x.keep1] = y[:, sy, sx]

        tiling.run_tiles(plan, lambda y0, y1, x0, x1: x[0, :, y0:y1, x0:x1],
                         lambda v, scale=scale: b.infer(v, scale), write, 1)  # sr's default batch
        assert np.array_equal(out, whole), (backend_name, scale, np.abs(out - whole).max())
