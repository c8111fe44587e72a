"""`python -m pipeline doctor`: what this machine can run (GPU, CUDA, PyTorch, ONNX Runtime, TensorRT, our plugins),
proven by running it; exit 0 all present passed, 1 a check failed, 3 no CUDA GPU (see pipeline.doctor)."""
from __future__ import annotations

from pathlib import Path

from models.external.spec import is_external
from models.spec import MODELS, OWN_MODELS  # no numpy or PyTorch: doctor runs on a bare system python
from pipeline.doctor import diagnose
from pipeline.errors import PipelineError


def add_arguments(parser) -> None:
    parser.add_argument("--output", type=Path, default=Path("outputs/doctor"), metavar="DIR",
                        help="folder for doctor.md and doctor.json (default: outputs/doctor)")
    parser.add_argument("--model", default=None, help="the model whose TensorRT engines are checked, or 'all' "
                                                      "(default: all)")
    parser.add_argument("--no-engines", action="store_true", help="skip the TensorRT engine build-and-compare step")


def run(args) -> int:
    if args.model not in (None, "all") and args.model not in MODELS and not is_external(args.model):
        # options.models_from_args says the same, but importing options needs numpy and ONNX Runtime
        raise PipelineError(f"unknown model '{args.model}' (known: all, {', '.join(MODELS)})")
    models = list(OWN_MODELS) if args.model in (None, "all") else [args.model]
    return diagnose(args.output, models, engines=not args.no_engines)
