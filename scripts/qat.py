"""Quantization-aware fine-tuning of srcnn-x3: the shipped weights trained a little further with the int8 file's
rounding in the loop, so the int8 file made from them keeps >= 90 % of the model's gain over bicubic.

    python scripts/qat.py [--steps N] [--out-dir models/weights]    (`make qat`: writes the shipped weights)

The fake-quant sits where pipeline.export.quantize puts Q/DQ in srcnn-x3's folded graph, written in the HR-grid
SRCNN (the fold is exact in fp32, so both compute one function):
- each conv's weights per output channel, symmetric, at 7 bits ([-64, 63]: the narrowest any CPU gets,
  pipeline.native.cpu.int8_weight_bits; a VNNI machine's 8 bits round finer still). conv2's and conv3's channels are
  the folded graph's (fold2 is conv2 per phase; each phase of fold3 reads a subset of conv3's taps, so its step is
  at most this one); conv1's rounding stands for fold1's (conv1 with the bicubic phase filters, its own channels);
- each ReLU's output (the input of fold2 and fold3) in 256 steps over [0, its 99.999th percentile] (the exporter's
  shifted u8 range), the percentile followed per batch (a running mean: it moves as the weights do);
- the image enters exactly (the exporter's image conv reads 8-bit pixels at 1/255): no fake-quant on it.
Straight-through gradients (torch.fake_quantize_*: zero outside the range). Adam, cosine from --lr to 1/20 of it,
seeded: the step count fixes the result. Writes <model>.pt and its model card (train.py's, the held-out evaluation
measured again, a "qat" entry saying what was done from which weights).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from models.registry import WEIGHTS_DIR, file_sha256, get_spec  # noqa: E402
from pipeline.analysis.evaluate import evaluate, format_table  # noqa: E402
from pipeline.artifacts.atomic import atomic_path, atomic_write  # noqa: E402
from pipeline.data import sample_images  # noqa: E402
from train import TRAIN_OUT, PatchSampler  # noqa: E402

MODEL = "srcnn-x3"
WEIGHT_BITS = 7  # the narrowest weight width an int8 file gets (no VNNI)
PERCENTILE = 99.999  # pipeline.export.quantize.PERCENTILE: the u8 activation range's top
MOMENTUM = 0.9  # running mean of each activation's per-batch percentile
DEFAULTS = dict(steps=3000, batch=16, patch=48, lr=1e-4, seed=0)


def fake_weights(w: torch.Tensor, bits: int = WEIGHT_BITS) -> torch.Tensor:
    """Per-output-channel symmetric rounding as pipeline.export.quantize.narrow_weights does it."""
    top = 2 ** (bits - 1) - 1
    step = w.detach().abs().flatten(1).amax(dim=1).clamp_min(1e-12) / top
    return torch.fake_quantize_per_channel_affine(w, step, torch.zeros_like(step, dtype=torch.int32), 0,
                                                  -top - 1, top)


class ActRange:
    """One ReLU output's u8 range: the running mean of its per-batch PERCENTILE (top k values of the batch)."""

    def __init__(self):
        self.top: float | None = None

    def __call__(self, x: torch.Tensor, training: bool) -> torch.Tensor:
        if training or self.top is None:
            flat = x.detach().flatten()
            k = max(1, int(math.ceil(flat.numel() * (1 - PERCENTILE / 100))))
            now = float(flat.topk(k).values[-1])
            self.top = now if self.top is None else MOMENTUM * self.top + (1 - MOMENTUM) * now
        return torch.fake_quantize_per_tensor_affine(x, max(self.top, 1e-8) / 255, 0, 0, 255)


def qat_forward(model, lr: torch.Tensor, ranges: tuple[ActRange, ActRange], training: bool) -> torch.Tensor:
    """srcnn-x3 as its int8 file computes it (module docstring)."""
    x = model.upsample(lr, None)
    h = F.relu(F.conv2d(x, fake_weights(model.conv1.weight), model.conv1.bias, padding=model.conv1.padding))
    h = F.relu(F.conv2d(ranges[0](h, training), fake_weights(model.conv2.weight), model.conv2.bias))
    return F.conv2d(ranges[1](h, training), fake_weights(model.conv3.weight), model.conv3.bias,
                    padding=model.conv3.padding)


def fine_tune(model, sampler: PatchSampler, steps: int, batch: int, lr: float, log_every: int = 250) -> None:
    ranges = (ActRange(), ActRange())
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=lr / 20)
    t0, running = time.perf_counter(), 0.0
    model.train()
    for step in range(1, steps + 1):
        s, x, y = sampler.batch(batch)
        loss = F.mse_loss(qat_forward(model, x, ranges, True), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        running += loss.item()
        if step % log_every == 0:
            print(f"[qat] step {step}/{steps}  mse {running / log_every:.3e}  ranges "
                  f"{ranges[0].top:.3f} {ranges[1].top:.3f}  {time.perf_counter() - t0:.0f}s", flush=True)
            running = 0.0
    model.eval()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for k, v in DEFAULTS.items():
        p.add_argument(f"--{k}", type=type(v), default=v)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (the machine may be shared)")
    p.add_argument("--from-weights", type=Path, default=WEIGHTS_DIR / get_spec(MODEL).weights_file,
                   help="the fp32-trained weights to start from (default: the shipped ones)")
    p.add_argument("--out-dir", type=Path, default=TRAIN_OUT,
                   help=f"folder for {MODEL}.pt and its card (default {TRAIN_OUT}; `make qat` writes the shipped)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    spec = get_spec(MODEL)
    source = args.from_weights
    card = json.loads(source.with_suffix(".json").read_text())
    start = card.get("training", {}).get("qat", {}).get("from_sha256")
    if start is not None:  # already fine-tuned: start again from the weights it was fine-tuned from
        raise SystemExit(f"{source} is already fine-tuned from {start[:12]}; give --from-weights the fp32-trained "
                         "weights (git show <commit>:models/weights/srcnn-x3.pt)")
    model = spec.build()
    model.load_state_dict(torch.load(source, weights_only=True))
    images = sample_images.train()
    sampler = PatchSampler(images, (spec.default_scale,), args.patch, args.seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    fine_tune(model, sampler, args.steps, args.batch, args.lr)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - cpu0

    args.out_dir.mkdir(parents=True, exist_ok=True)
    weights_path = args.out_dir / spec.weights_file
    with atomic_path(weights_path) as tmp:
        torch.save({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, tmp)
    t1 = time.perf_counter()
    result = evaluate(MODEL, [2.0, 3.0, 4.0], weights_path)
    print(format_table(result), flush=True)
    card["weights_sha256"] = file_sha256(weights_path)
    card["training"]["qat"] = {
        "from_sha256": file_sha256(source), "steps": args.steps, "batch": args.batch, "hr_patch": args.patch,
        "lr": args.lr, "schedule": "Adam, cosine to lr/20", "seed": args.seed, "weight_bits": WEIGHT_BITS,
        "activations": f"u8 over [0, {PERCENTILE}th percentile] after each ReLU", "script": "scripts/qat.py",
        "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1), "threads": torch.get_num_threads()}
    card["evaluation"] = {"seconds": round(time.perf_counter() - t1, 1),
                          **{k: v for k, v in result.items() if k not in ("model", "weights", "weights_sha256")}}
    atomic_write(weights_path.with_suffix(".json"), json.dumps(card, indent=2) + "\n")
    print(f"[qat] wrote {weights_path} and its card ({seconds:.0f}s fine-tuning)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
