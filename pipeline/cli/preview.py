"""`python -m pipeline preview INPUT`: every backend x precision on samples of INPUT, with the whole job's time and
size, and the command to run it (pipeline.preview)."""
from __future__ import annotations

from pipeline import preview
from pipeline.cli import options


def add_arguments(p) -> None:
    p.add_argument("input", help="an image, a folder (images and videos, as sr reads them) or a video")
    options.add_model_args(p, files=False)
    p.add_argument("--scale", type=float, help=options.scale_help())
    p.add_argument("--backends", nargs="+", metavar="B", help="only these backends (default: every available one)")
    p.add_argument("--precisions", nargs="+", metavar="P", help="only these precisions (default: every one)")
    p.add_argument("--samples", type=int, default=4,
                   help="images spread over a folder, or runs of 8 frames spread over a clip (default: 4)")
    options.add_output_dir_arg(p, default="outputs/preview")


def run(args) -> int:
    prep = preview.prepare(preview.PreviewOptions(
        args.input, args.output, model=options.model_from_args(args), scale=args.scale,
        backends=tuple(args.backends) if args.backends else None,
        precisions=tuple(args.precisions) if args.precisions else None, samples=args.samples))
    outcome = preview.preview(prep)
    paths = preview.write(outcome)
    for line in preview.terminal(outcome, paths):
        print(line)
    return 0 if outcome.recommended is not None else 1
