"""scripts/train.py pieces: identity init, the fast training paths agree with the models, aligned
patches at non-integer scales, and a tiny end-to-end run writes loadable weights and a card."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from models.registry import MODELS, load_model, size_tensor
from models.spec import OWN_MODELS

_PATH = Path(__file__).resolve().parents[1] / "scripts" / "train.py"
_spec = importlib.util.spec_from_file_location("srdeploy_train", _PATH)
train = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(train)


@pytest.mark.parametrize("name", OWN_MODELS)
def test_identity_init_starts_at_bicubic(name):
    model = MODELS[name].build()
    train.init_identity(model, torch.Generator().manual_seed(0))
    x = torch.rand(1, 3, 20, 20)
    with torch.no_grad():
        out = train.forward(model.eval(), name, x, 3.0)
    bic = F.interpolate(x, size=(60, 60), mode="bicubic", align_corners=False).clamp(min=0)
    inner = (slice(None), slice(None), slice(6, -6), slice(6, -6))  # away from conv zero padding
    assert (out - bic)[inner].abs().max() < 0.05


def test_training_deform_conv_matches_torchvision():
    assert train.check_deform_equivalence(seed=3) < 1e-9


def test_training_forward_matches_deform_srcnn():
    torch.manual_seed(0)
    model = MODELS["deform-srcnn"].build().eval()
    x = torch.rand(1, 3, 9, 11)
    with torch.no_grad():
        ref = model(x, size_tensor(9, 11, 2.5))
        # offset_conv is zero-initialised: the frozen-offset fast path is exact
        assert torch.allclose(train.forward(model, "deform-srcnn", x, 2.5, offsets=False), ref, atol=1e-5)
        for p in model.offset_conv.parameters():
            p.normal_(0, 0.05)
        ref = model(x, size_tensor(9, 11, 2.5))
        assert torch.allclose(train.forward(model, "deform-srcnn", x, 2.5, offsets=True), ref, atol=1e-5)


def test_patch_sampler_aligned_at_non_integer_scale():
    img = np.random.default_rng(0).integers(0, 256, (90, 100, 3), dtype=np.uint8)
    sampler = train.PatchSampler({"a": img}, (2.5,), patch=40, seed=0, min_std=0)
    s, lr, hr = sampler.batch(3)
    assert s == 2.5 and lr.shape[-1] % 2 == 0
    assert hr.shape[-2:] == (lr.shape[-2] * 2.5, lr.shape[-1] * 2.5)
    assert lr.min() >= 0 and lr.max() <= 1


@pytest.mark.parametrize("steps", [2, 20])  # 20: too short for one-cycle's warm-up (once a ZeroDivisionError)
def test_tiny_training_run_writes_weights_and_card(tmp_path, monkeypatch, steps):
    # two training images keep the data preparation short; no evaluation scales
    monkeypatch.setattr(train.sample_images, "TRAIN", ("camera", "coins"))
    card = train.train_one("srcnn-x3", steps=steps, batch=2, patch=24, lr=1e-4, seed=0, max_minutes=5,
                           out_dir=tmp_path, eval_scales=[], log_every=1)
    weights = tmp_path / "srcnn-x3.pt"
    state = torch.load(weights, weights_only=True)
    assert set(state) == set(MODELS["srcnn-x3"].build().state_dict())
    load_model("srcnn-x3", weights)
    on_disk = json.loads((tmp_path / "srcnn-x3.json").read_text())
    assert on_disk == json.loads(json.dumps(card))
    assert on_disk["training"]["images"] == ["camera", "coins"] and on_disk["training"]["steps_done"] == steps
    assert on_disk["training"]["held_out_images"] and on_disk["weights_sha256"]


def test_scale_mix_gives_named_scales_their_share():
    p = train.scale_probabilities(train.MIXED_SCALES, {2.0: 0.5})
    assert p.sum() == pytest.approx(1.0) and p[0] == pytest.approx(0.5)
    assert all(v == pytest.approx(0.5 / 8) for v in p[1:])
    default = train.scale_probabilities(train.MIXED_SCALES, train.SCALE_SHARES)
    assert default[train.MIXED_SCALES.index(3.0)] == max(default) and default.sum() == pytest.approx(1.0)
    assert train.scale_probabilities((3.0,), train.SCALE_SHARES).tolist() == [1.0]
    with pytest.raises(ValueError):
        train.scale_probabilities(train.MIXED_SCALES, {2.0: 0.7, 3.0: 0.7})
    with pytest.raises(ValueError, match="not one of the training scales"):
        train.scale_probabilities(train.MIXED_SCALES, {5.0: 0.5})
    for bad in ("2=1.5", "5=0.5", "two"):
        with pytest.raises(SystemExit):
            train.main(["--model", "srcnn", "--share", bad])
