"""Models and registry: output shapes at many sizes/scales, mmagic checkpoint adaptation, weight errors."""
import pytest
import torch

from models.registry import (
    MODELS,
    ModelError,
    WeightsError,
    get_spec,
    load_model,
    output_size,
    run,
    size_tensor,
)
from models.spec import OWN_MODELS
from models.srcnn import SRCNN


@pytest.fixture(scope="module")
def built():
    torch.manual_seed(0)
    return {name: MODELS[name].build().eval() for name in OWN_MODELS}


@pytest.mark.parametrize("name", ["srcnn", "deform-srcnn"])
@pytest.mark.parametrize("hw", [(1, 1), (5, 7), (16, 11)])
@pytest.mark.parametrize("scale", [2.0, 2.5, 3.0, 4.0, 1.5])
def test_run_time_factor_shapes(built, name, hw, scale):
    x = torch.rand(2, 3, *hw)
    with torch.no_grad():
        y = run(built[name], MODELS[name], x, scale)
    assert tuple(y.shape) == (2, 3, *output_size(*hw, scale))
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("hw", [(1, 1), (4, 9), (12, 12)])
def test_static_x3_shapes(built, hw):
    with torch.no_grad():
        y = run(built["srcnn-x3"], MODELS["srcnn-x3"], torch.rand(1, 3, *hw), 3)
    assert tuple(y.shape) == (1, 3, hw[0] * 3, hw[1] * 3)


def test_output_size_rounds_half_up_and_size_tensor():
    assert output_size(3, 5, 2.5) == (8, 13)  # 7.5 -> 8, 12.5 -> 13
    assert output_size(1, 1, 0.1) == (1, 1)
    t = size_tensor(10, 7, 3)
    assert t.dtype == torch.int64 and t.tolist() == [30, 21]


def test_scale_contract():
    with pytest.raises(ValueError, match="exactly 3"):
        get_spec("srcnn-x3").check_scale(2)
    for bad in (1.0, 0.5, 9.0, float("nan")):
        with pytest.raises(ValueError, match="out of range"):
            get_spec("srcnn").check_scale(bad)
    with pytest.raises(ModelError, match="unknown model"):
        get_spec("nope")


def test_mmagic_checkpoint_loads_through_loader(tmp_path):
    torch.manual_seed(1)
    src = SRCNN(upscale_factor=3)
    ckpt = {
        "meta": {"mmagic_version": "1.2.0", "iter": 100},
        "state_dict": {**{f"generator.{k}": v for k, v in src.state_dict().items()},
                       "step_counter": torch.tensor(5)},  # non-generator entries are dropped
    }
    path = tmp_path / "srcnn_x3_mmagic.pth"
    torch.save(ckpt, path)
    model = load_model("srcnn-x3", path)
    for k, v in src.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k
    x = torch.rand(1, 3, 6, 5)
    with torch.no_grad():
        assert torch.allclose(model(x), src.eval()(x))


def _one_line(err: pytest.ExceptionInfo, path) -> str:
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_missing_weights_file(tmp_path):
    path = tmp_path / "absent.pt"
    with pytest.raises(WeightsError) as e:
        load_model("srcnn", path)
    assert "not found" in _one_line(e, path)


def test_truncated_weights_file(tmp_path):
    good = tmp_path / "good.pt"
    torch.save(MODELS["srcnn"].build().state_dict(), good)
    data = good.read_bytes()
    bad = tmp_path / "truncated.pt"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError) as e:
        load_model("srcnn", bad)
    assert "is truncated or corrupt" in _one_line(e, bad)  # torch says "[Errno 22] Invalid argument"
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a torch file")
    with pytest.raises(WeightsError) as e:
        load_model("srcnn", junk)
    assert "is not a PyTorch checkpoint (state dict)" in _one_line(e, junk)


def test_whole_module_pickle_is_one_line_not_torch_paragraph(tmp_path):
    path = tmp_path / "module.pt"
    torch.save(SRCNN(), path)  # a pickled nn.Module: weights_only loading refuses it with a paragraph
    with pytest.raises(WeightsError) as e:
        load_model("srcnn", path)
    msg = _one_line(e, path)
    assert "is not a PyTorch checkpoint (state dict)" in msg and "weights_only" not in msg


def test_import_models_and_spec_without_torch():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "import models\nfrom models.lookup import get_spec\n"
            "assert get_spec('srcnn').receptive_radius == 6 and models.output_size(3, 5, 2.5) == (8, 13)\n"
            "try:\n    import models.registry\nexcept ImportError:\n    print('torch side needs torch')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "torch side needs torch"


def test_spec_round_trips_through_onnx_metadata():
    from models.spec import ModelSpec

    for spec in MODELS.values():
        back = ModelSpec.from_metadata(spec.to_metadata())
        assert (back.name, back.default_scale, back.scale_range, back.dynamic_scale, back.receptive_radius) == (
            spec.name, spec.default_scale, spec.scale_range, spec.dynamic_scale, spec.receptive_radius)


def test_mismatched_weights_file(tmp_path):
    path = tmp_path / "deform.pt"
    torch.save(MODELS["deform-srcnn"].build().state_dict(), path)
    with pytest.raises(WeightsError) as e:
        load_model("srcnn", path)
    msg = _one_line(e, path)
    assert "does not fit model 'srcnn'" in msg and "unexpected keys" in msg
    small = SRCNN(channels=(3, 32, 16, 3))
    path2 = tmp_path / "narrow.pt"
    torch.save(small.state_dict(), path2)
    with pytest.raises(WeightsError) as e:
        load_model("srcnn", path2)
    assert "expected (64, 3, 9, 9)" in _one_line(e, path2)
    path3 = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), path3)
    with pytest.raises(WeightsError) as e:
        load_model("srcnn", path3)
    assert "expected a state dict" in _one_line(e, path3)


@pytest.mark.parametrize("name", OWN_MODELS)
def test_shipped_weights_load_with_weights_only(name):
    spec = get_spec(name)
    state = torch.load(spec.weights_path, map_location="cpu", weights_only=True)
    assert set(state) == set(spec.build().state_dict())
    model = load_model(name)
    assert not model.training
    assert spec.weights_path.with_suffix(".json").is_file()
