"""The sr stage runs without PyTorch: its bicubic (alpha planes, the --reference baseline) is OpenCV's and
equals torch's; importing the stage never imports torch."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline.images.bicubic import bicubic

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("scale", [2, 3, 2.5])
def test_bicubic_equals_torch_interpolate(scale):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    for shape in ((3, 17, 23), (1, 20, 9), (4, 8, 8)):
        x = rng.random(shape, dtype=np.float32)
        size = (round(shape[1] * scale), round(shape[2] * scale))
        exp = F.interpolate(torch.from_numpy(x)[None], size=size, mode="bicubic", align_corners=False)[0].numpy()
        got = bicubic(x, size)
        assert got.shape == exp.shape and np.abs(got - exp).max() < 1e-5, (scale, shape)
        plane = bicubic(x[0], size)  # HW planes (alpha) too
        assert plane.shape == size and np.abs(plane - exp[0]).max() < 1e-5


BLOCK_TORCH = """
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "torchvision"):
            raise ImportError(f"import of {name} blocked (the sr stage must not need PyTorch)")
sys.meta_path.insert(0, _NoTorch())
import numpy as np
import pipeline.cli.sr, pipeline.sr, pipeline.sr.api
import pipeline.sr.runner.worker, pipeline.sr.runner.scheduler, pipeline.sr.runner.reference
import pipeline.bench.folder
from pipeline.images.bicubic import bicubic
from pipeline.sr.runner.reference import bicubic_pixels
from pipeline.images.imageio import Image
im = Image(np.arange(4 * 5 * 4, dtype=np.uint8).reshape(4, 5, 4))
assert bicubic_pixels(im, 12, 15).shape == (12, 15, 3)
assert bicubic(np.ones((4, 5), np.float32), (12, 15)).shape == (12, 15)
assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "torchvision")]
print("ok")
"""


def test_sr_stage_imports_and_resizes_without_torch():
    p = subprocess.run([sys.executable, "-c", BLOCK_TORCH], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]
