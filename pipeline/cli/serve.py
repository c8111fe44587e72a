"""`python -m pipeline serve REPO`: run tritonserver on a model repository until Ctrl-C or SIGTERM."""
from __future__ import annotations

import sys
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.serve.server import plan_server, serve


def add_arguments(p) -> None:
    p.add_argument("repo", type=Path, help="model repository (`python -m pipeline triton --output REPO`)")
    p.add_argument("--tritonserver", type=Path, metavar="PATH", help="tritonserver binary (default: the one "
                   "`make triton-env` unpacked from the nvidia-pytriton wheel, with the Python backend only)")
    p.add_argument("--host", default="127.0.0.1", help="address the HTTP, gRPC and metrics endpoints bind "
                   "(default: 127.0.0.1; 0.0.0.0 serves every interface)")
    p.add_argument("--http-port", type=int, default=8000, help="default: 8000")
    p.add_argument("--grpc-port", type=int, default=8001, help="default: 8001")
    p.add_argument("--metrics-port", type=int, default=8002, help="default: 8002")
    p.add_argument("--model", action="append", dest="models", metavar="NAME",
                   help="load only this model (repeatable; default: every model this server has a backend for)")
    p.add_argument("--stop-after", type=float, metavar="SECONDS", help="stop by itself after this long")
    p.add_argument("--quiet", action="store_true", help="hide tritonserver's own log (errors still surface)")


def run(args) -> int:
    if args.stop_after is not None and args.stop_after <= 0:
        raise PipelineError("--stop-after must be positive")
    plan = plan_server(args.repo, binary=args.tritonserver, host=args.host, http_port=args.http_port,
                       grpc_port=args.grpc_port, metrics_port=args.metrics_port, models=args.models)
    return serve(plan, stop_after=args.stop_after, echo=None if args.quiet else sys.stderr)
