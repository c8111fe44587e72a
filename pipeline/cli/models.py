"""`python -m pipeline models`: our models, the checkpoint architectures that load, and what one user model is."""
from __future__ import annotations

import argparse
import json

from models import external  # torch-free: spandrel and PyTorch load only to list or describe
from models.fetched import FETCHED
from models.fetched import problem as fetched_problem
from models.spec import MODELS, file_sha256
from pipeline.artifacts.identity import resolve
from pipeline.errors import PipelineError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="PATH|MODULE:FACTORY",
                        help="describe this checkpoint or factory (architecture, scale, SHA-256, measured "
                             "receptive field) instead of listing")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")


def _scale_text(spec) -> str:
    lo, hi = spec.scale_range
    return f"x{lo:g}" if lo == hi else f"any in {spec.scales_text}"


def listing() -> str:
    width = max(len(n) for n in MODELS)
    lines = ["our models (--model NAME):"]
    for s in MODELS.values():
        lines.append(f"  {s.name:<{width}}  {_scale_text(s):<16} {s.description}")
        if s.source:  # fetched weights: where from, licence, what for, whether they are here
            lines.append(f"  {'':<{width}}  {'':<16} for {s.use}; licence {s.licence}; from {s.source}; "
                         f"{fetched_problem(s.name) or 'weights fetched and verified'}")
            lines.append(f"  {'':<{width}}  {'':<16} measured here: {FETCHED[s.name].measured}")
    import spandrel

    lines.append(f"your checkpoints (--model FILE{'|'.join(external.SUFFIXES)}) of these spandrel "
                 f"{spandrel.__version__} architectures:")
    lines.append("  " + ", ".join(external.architectures()))
    lines.append("your own nn.Module (--model package.module:factory): factory() returns (module, scale) or a "
                 "module with a `scale` attribute")
    return "\n".join(lines)


def describe(value: str) -> dict:
    if value in MODELS:
        return registered(MODELS[value])
    if not external.is_external(value):
        raise PipelineError(f"'{value}' is neither one of our models ({', '.join(MODELS)}), a checkpoint "
                            f"({', '.join(external.SUFFIXES)}) nor package.module:factory")
    return resolve(value).external.describe()  # a file that does not load: one PipelineError line


def run(args: argparse.Namespace) -> int:
    if not args.model:
        print(json.dumps({"models": sorted(MODELS), "architectures": external.architectures()}) if args.json
              else listing())
        return 0
    info = describe(args.model)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(summary(info))
    return 0


def registered(spec) -> dict:
    """One of our models as `models --model NAME` describes it: scales, receptive field and shipped weights."""
    path = spec.weights_path
    return {"name": spec.name, "registered": True, "description": spec.description, "scales": spec.scales_text,
            "default_scale": spec.default_scale, "receptive_radius": spec.receptive_radius, "weights": str(path),
            "sha256": file_sha256(path) if path.is_file() else None, "licence": spec.licence or None,
            "source": spec.source or None, "use": spec.use or None, "weights_hint": spec.weights_hint}


def summary(info: dict) -> str:
    """One line: what the model is and what tiling and precision can do with it."""
    if info.get("registered"):
        sha = f"sha256 {info['sha256'][:16]}..." if info["sha256"] else f"missing: {info['weights_hint']}"
        origin = f"; for {info['use']}, licence {info['licence']}, from {info['source']}" if info["source"] else ""
        return (f"{info['name']}: our model{origin}, {info['description']}; scale {info['scales']} (default "
                f"x{info['default_scale']:g}), receptive radius {info['receptive_radius']} px; shipped weights "
                f"{info['weights']} ({sha}); your own: --model {info['name']} --weights FILE")
    rf = info["receptive_field"]
    sizes = "any size" if info["any_size"] else f">= {info['min_size']} px"
    if info["align"] > 1:
        sizes += f" (padded to a multiple of {info['align']})"
    return (f"{info['name']}: {info['architecture']} x{info['scale']}, sha256 {info['sha256'][:16]}..., "
            f"receptive field {'whole image' if rf is None else f'{rf} px'}, inputs {sizes}, "
            f"fp16 {'yes' if info['supports_half'] else 'no'}")
