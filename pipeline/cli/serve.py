"""`python -m pipeline serve REPO`: run tritonserver on a model repository until Ctrl-C or SIGTERM."""
from __future__ import annotations

import sys
from pathlib import Path

from pipeline.artifacts.atomic import folder_problem
from pipeline.artifacts.cache import cache_dir
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
    p.add_argument("--log", type=Path, metavar="FILE", help="tritonserver's own log (default: "
                   "serve/tritonserver-HTTP_PORT.log in the artifact cache); its last lines print on a failure")
    p.add_argument("--verbose", action="store_true", help="also print tritonserver's log as it runs")
    p.add_argument("--quiet", action="store_true", help="not even the log's last lines on a failure (the error "
                   "line still prints)")


def run(args) -> int:
    if args.stop_after is not None and args.stop_after <= 0:
        raise PipelineError("--stop-after must be positive")
    plan = plan_server(args.repo, binary=args.tritonserver, host=args.host, http_port=args.http_port,
                       grpc_port=args.grpc_port, metrics_port=args.metrics_port, models=args.models)
    log = args.log if args.log is not None else cache_dir() / "serve" / f"tritonserver-{args.http_port}.log"
    problem = folder_problem(log.parent)
    if problem:
        raise PipelineError(f"--log {log}: its folder {problem}")
    return serve(plan, stop_after=args.stop_after, echo=sys.stderr if args.verbose else None, log=log,
                 tail=not args.quiet)
