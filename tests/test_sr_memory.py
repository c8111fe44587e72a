"""Tiled inference keeps memory bounded by the tile, not the image (peak RSS of a real `sr` run in a
subprocess). The >= 4000x3000 measurement takes minutes on a CPU: it runs with SRDEPLOY_SLOW=1
(`SRDEPLOY_SLOW=1 pytest -s -m slow tests/test_sr_memory.py` prints the numbers)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from models.registry import get_spec

ROOT = Path(__file__).resolve().parents[1]
# Runs CLI commands one after the other in a fresh interpreter and reports, for the last one, how far the process's
# peak RSS rose above its RSS at that run's start. The peak is the kernel's own high-water mark (VmHWM), reset to the
# current RSS just before the run (/proc/self/clear_refs, 5): never missed, as a sampling thread on a loaded machine
# can, and not an earlier peak (imports, the warm-up runs, which load the model and the lazily imported modules).
SNIPPET = """
import json, re, sys, time
import torch, torch.nn.functional, cv2
import pipeline.sr.api, pipeline.backends.torch_backend, pipeline.backends.ort_backend
from pipeline.cli import main
def status(key):
    with open("/proc/self/status") as f:
        return int(re.search(key + r":\\s+(\\d+) kB", f.read()).group(1)) * 1024
runs = json.loads(sys.argv[1])
for argv in runs[:-1]:
    assert main(argv) == 0
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
start = status("VmRSS")
t = time.perf_counter()
code = main(runs[-1])
peak = status("VmHWM")
print(json.dumps({"code": code, "peak_rss_mib": peak / 2**20, "rise_mib": (peak - start) / 2**20,
                  "wall_s": time.perf_counter() - t}))
"""


def _weights(tmp_path):
    spec = get_spec("srcnn")
    if spec.weights_path.is_file():
        return []
    torch.manual_seed(0)
    torch.save(spec.build().state_dict(), tmp_path / "srcnn.pt")
    return ["--weights", str(tmp_path / "srcnn.pt")]


def _image(path: Path, h: int, w: int) -> None:
    # Real photo content tiled up to the size (a flat image would compress to nothing on write).
    base = np.ascontiguousarray(cv2.cvtColor(__import__("skimage.data").data.astronaut(), cv2.COLOR_RGB2BGR))
    reps = (-(-h // base.shape[0]), -(-w // base.shape[1]), 1)
    cv2.imwrite(str(path), np.tile(base, reps)[:h, :w])


def _run_sr(runs, timeout):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = json.dumps([["sr", *map(str, args)] for args in runs])
    p = subprocess.run([sys.executable, "-c", SNIPPET, argv], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_tiling_bounds_peak_memory(tmp_path):
    """Whole-image inference holds every activation of the full output at once; tiles do not."""
    _image(tmp_path / "in.png", 300, 300)   # -> 600x600 output
    common = ["--model", "srcnn", "--scale", "2", "--backend", "torch", "--threads", "1", "--quiet",
              *_weights(tmp_path)]
    _image(tmp_path / "small.png", 40, 40)
    warm = [tmp_path / "small.png", tmp_path / "warm.png", *common]
    # one process per measured run, each warmed up by a small run first
    tiled = _run_sr([warm, [tmp_path / "in.png", tmp_path / "tiled.png", "--tile", 32, *common]], 300)
    whole = _run_sr([warm, [tmp_path / "in.png", tmp_path / "whole.png", "--tile", 0, *common]], 300)
    assert whole["code"] == tiled["code"] == 0
    # conv1 alone is 64 channels x 0.36 MPix x 4 B = 92 MB for the whole image; a 32-px tile's crop is ~2%.
    assert whole["rise_mib"] > 80 and tiled["rise_mib"] < whole["rise_mib"] / 3, (tiled, whole)
    a = cv2.imread(str(tmp_path / "whole.png")).astype(int)
    b = cv2.imread(str(tmp_path / "tiled.png")).astype(int)
    assert np.array_equal(a, b)  # tiled output equals whole-image output exactly


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("SRDEPLOY_SLOW"), reason="minutes on a CPU: set SRDEPLOY_SLOW=1")
@pytest.mark.parametrize("backend", ["ort"])
def test_large_image_peak_rss(tmp_path, backend, monkeypatch):
    h, w, scale = 3000, 4000, 2
    _image(tmp_path / "big.png", h, w)
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "cache"))
    common = ["--model", "srcnn", "--scale", scale, "--backend", backend, "--quiet", *_weights(tmp_path)]
    _image(tmp_path / "small.png", 40, 40)
    res = _run_sr([[tmp_path / "small.png", tmp_path / "warm.png", *common],
                   [tmp_path / "big.png", tmp_path / "big_x2.png", "--tile", 256, "--summary", tmp_path / "s.json",
                    *common]], 3600)
    s = json.loads((tmp_path / "s.json").read_text())
    img = s["images"][0]
    out_mib = h * w * scale * scale * 3 / 2**20
    print(f"\n{backend}: {w}x{h} -> {img['out_size'][0]}x{img['out_size'][1]}, {img['tiles']} tiles, "
          f"peak RSS {res['peak_rss_mib']:.0f} MiB (rise during the run {res['rise_mib']:.0f} MiB; output buffer "
          f"{out_mib:.0f} MiB), "
          f"{s['mpix_per_s']} MPix/s, {res['wall_s']:.0f} s")
    assert img["status"] == "ok" and img["out_size"] == [w * scale, h * scale]
    # Whole-image float activations would be ~100 B x 48 MPix = 19 GiB; the tiled run needs the input and
    # output buffers, the encoded file and one tile's activations.
    assert res["rise_mib"] < 2 * out_mib + 600
