"""Try int8 quantization recipes on a model and print each one's held-out Y-PSNR loss through OpenVINO (the
project's quality store protocol, pipeline.quality.measure) and its 256x256 time.

    python scripts/int8_recipes.py srcnn-x3 recipe "first,last" "first,last:Entropy" ...

A recipe is KEEP[:METHOD[:CROPS[:PERCENTILE]]], KEEP a comma list of first/last/custom (see
pipeline.export.quantize.excluded; "recipe": the shipped choice for the graph, keep_float) and the switches
naive-image (the image convs quantized as any other, or left in float with 'first'), plain-relu (ReLU-fed convs not
shifted, and the last layer all float with 'last'), q-outputs (Conv outputs quantized too) and unsplit (a folded
graph quantized as it is, not split per output phase: pipeline.export.phases). "recipe" is the
shipped recipe ("first,last" for a model's graph, nothing kept in float for a folded one). Each line says the loss,
the fidelity to fp32 (mean, worst image) and the time. Files go to a temporary cache; nothing is stored.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def main(argv: list[str]) -> None:
    os.environ.setdefault("SRDEPLOY_CACHE", tempfile.mkdtemp(prefix="int8-recipes-"))
    from pipeline import quality
    from pipeline.backends import create_named, openvino_backend, time_backend
    from pipeline.errors import PipelineError
    from pipeline.export import quantize as q

    model, recipes = argv[0], argv[1:]
    for n, recipe in enumerate(recipes):
        parts = recipe.split(":")
        words = [k for k in parts[0].split(",") if k]
        switches = {"naive-image": "exact_image", "q-outputs": "float_outputs", "plain-relu": "shift_relu",
                    "unsplit": "phases"}
        opts = {"keep": None if "recipe" in words else tuple(k for k in words if k not in switches)}
        opts.update({switches[k]: False for k in words if k in switches})
        if len(parts) > 1:
            opts["method"] = parts[1]
        if len(parts) > 2:
            opts["crops"] = int(parts[2])
        if len(parts) > 3:
            opts["percentile"] = float(parts[3])

        def made(fp32, scale, log=None, _opts=opts, _n=n, **_hooks):
            dst = Path(os.environ["SRDEPLOY_CACHE"]) / f"r{_n}-{Path(fp32).stem}.onnx"
            if not dst.is_file():
                q.quantize(Path(fp32), dst, scale, **_opts)
            return dst

        openvino_backend.int8_file = made
        try:
            b = create_named("openvino", model, "int8", threads=2)
            rec = quality.measure(b)
        except PipelineError as e:
            print(f"{model} {recipe:28s} {e}", flush=True)
            continue
        ms = time_backend(b, 256, repeats=5, warmup=2)
        print(f"{model} {recipe:28s} loss {rec['psnr_loss_db']:.4f} dB  ssim {rec['ssim_loss']:.5f}  fidelity "
              f"{rec['fidelity_mean_db']:.2f} (worst {rec['fidelity_worst_db']:.2f}) dB  {ms:.1f} ms at 256  "
              f"({b.last_path})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
