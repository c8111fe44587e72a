"""`python -m pipeline sr INPUT OUTPUT`: super-resolve an image or a folder tree of images."""
from __future__ import annotations

from pipeline.errors import PipelineError
from pipeline.sr.run import BACKENDS


def add_arguments(p) -> None:
    p.add_argument("input", help="image file or folder (searched recursively)")
    p.add_argument("output", help="output folder (mirrors INPUT's tree) or, for a single image, a file name")
    p.add_argument("--model", default="srcnn", help="registered model name (default: srcnn)")
    p.add_argument("--scale", type=float, default=None, help="upscale factor, integer or not (default: the model's)")
    p.add_argument("--backend", default="auto", help=f"{', '.join(BACKENDS)}, ... (`python -m pipeline backends` "
                                                     "lists them; default: auto = fastest available)")
    p.add_argument("--precision", default="fp32", help="fp32 or fp16 (default: fp32)")
    p.add_argument("--onnx", metavar="FILE", help="use this ONNX file instead of the cached export")
    p.add_argument("--engine", metavar="FILE", help="use this TensorRT engine instead of the cached build")
    p.add_argument("--weights", metavar="FILE", help="weights file instead of the model's shipped weights")
    p.add_argument("--threads", type=int, default=None, help="inference threads (default: the backend's choice)")
    p.add_argument("--format", dest="fmt", help="output format: png, jpg, bmp, tiff, webp (default: as the input)")
    p.add_argument("--jpeg-quality", type=int, default=95, help="JPEG/WebP quality (default: 95)")
    p.add_argument("--tile", type=int, default=None,
                   help="tile side in input pixels; 0 = never tile (default: from free memory)")
    p.add_argument("--tile-overlap", type=int, default=None,
                   help="context each tile reads past its region, input pixels (default: the model's "
                        "receptive field, which makes tiled output equal whole-image output)")
    p.add_argument("--batch", type=int, default=1, help="images (or tiles) of equal size per inference call")
    p.add_argument("--workers", type=int, default=2, help="threads decoding and encoding images (default: 2)")
    p.add_argument("--skip-existing", action="store_true", help="leave outputs that already exist (resume)")
    p.add_argument("--reference", metavar="HR_DIR", help="ground-truth HR images with the same relative names: "
                                                        "report PSNR/SSIM (Y, border cropped) vs bicubic")
    p.add_argument("--summary", metavar="FILE", help="write a JSON summary (per-image times, sizes, status)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or per-image lines (failures still print)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run on a Ray cluster: no ADDRESS starts one on this machine (127.0.0.1 only); 'auto' or "
                        "ray://HOST:PORT joins one (OUTPUT must be a path every node sees)")
    p.add_argument("--ray-actors", type=int, metavar="N", help="with --ray: actors upscaling in parallel, one GPU "
                   "each on GPU clusters, one CPU otherwise (default: one per GPU, else per CPU)")



def run(args) -> int:
    if args.ray is None and args.ray_actors is not None:
        raise PipelineError("--ray-actors applies to --ray runs")
    if args.ray is not None:
        from pipeline.cluster.runner import run_ray

        return run_ray(args)
    from pipeline.sr.run import run as run_folder

    return run_folder(args)
