"""`python -m pipeline <stage> ...`: one subcommand per pipeline stage.

Each stage has a module in this package exposing `add_arguments(parser)` and `run(args) -> int`; modules
are imported only when their subcommand runs, so `--help` and light stages stay fast.

Exit codes: 0 done; 1 the command ran but some items failed (images in `sr`, backends in `compare`);
2 bad usage or an error, printed as one line `error: ...` (`--debug`, before or after the stage name,
prints the traceback too); 130 interrupted.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import signal
import sys
import threading
import traceback

from pipeline.cli.terminal import escaped_output
from pipeline.errors import PipelineError, ReportedInterrupt, Terminated, first_line, missing_extra

# subcommand -> (module, one-line help)
STAGES = {
    "export": ("pipeline.cli.export", "PyTorch -> ONNX with the sr custom-domain ops (or standard ops)"),
    "engine": ("pipeline.cli.engine", "ONNX -> TensorRT engine with our plugins"),
    "sr": ("pipeline.cli.sr", "super-resolve images and videos (a file or a folder tree)"),
    "eval": ("pipeline.cli.eval", "PSNR/SSIM of a model vs bicubic on held-out images"),
    "preview": ("pipeline.cli.preview", "before a long job: every backend x precision on samples of INPUT, with the "
                                        "whole job's time and size"),
    "compare": ("pipeline.cli.compare", "compare every available backend's output with PyTorch FP32"),
    "bench": ("pipeline.cli.bench", "benchmark latency/throughput of every available backend"),
    "backends": ("pipeline.cli.backends", "list the backends this machine can run, and why others cannot"),
    "models": ("pipeline.cli.models", "list our models and the checkpoint architectures that load; describe one"),
    "triton": ("pipeline.cli.triton", "write a Triton model repository (TensorRT or ONNX Runtime, and the sr model)"),
    "serve": ("pipeline.cli.serve", "run tritonserver on a model repository (127.0.0.1 by default) until Ctrl-C"),
    "demo": ("pipeline.cli.demo", "end-to-end demo on shipped weights and skimage images"),
    "doctor": ("pipeline.cli.doctor", "what this machine can run (GPU, CUDA, TensorRT, plugins), proven by running it"),
}
DEBUG_FLAG = "--debug"


class UsageError(Exception):
    """A command line argparse rejects; reported as one line like any other error."""


class _Parser(argparse.ArgumentParser):
    # `usage_hint(message, argv) -> str`, set by a stage's add_arguments: more to say about an argparse error on
    # that command line, e.g. an optional-value flag that swallowed a positional.
    usage_hint = None
    argv: list[str] = []

    def error(self, message):  # argparse would print the usage block and exit
        hint = self.usage_hint(message, self.argv) if self.usage_hint else ""
        raise UsageError(f"{message}{hint}{self._did_you_mean(message)} (see: {self.prog} --help)")

    def _did_you_mean(self, message: str) -> str:
        """For a mistyped flag (`--sacle`), the closest one this command takes (Python 3.14's argparse does the
        same with suggest_on_error; this runs on 3.10 too)."""
        if not message.startswith("unrecognized arguments: "):
            return ""
        flags = [f for f in self._option_string_actions if f.startswith("--")]
        for word in message.removeprefix("unrecognized arguments: ").split():
            close = _closest(word.split("=", 1)[0], flags)
            if close:
                return f" (did you mean {close}?)"
        return ""


def _closest(flag: str, flags: list[str]) -> str | None:
    """The long flag a mistyped one meant: `--sacle` -> --scale, `-quiet` -> --quiet, and a one-letter short flag
    we do not take (`-q`) -> the one long flag with that initial (--quiet), if only one has it."""
    if not flag.startswith("-") or flag == "-":
        return None
    if not flag.startswith("--"):
        if len(flag) == 2:
            initial = [f for f in flags if f[2:3] == flag[1]]
            return initial[0] if len(initial) == 1 else None
        flag = "-" + flag
    close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.75)
    return close[0] if close else None


def _prog() -> str:
    """How the user ran us, for usage lines: the `srdeploy` script or `python -m pipeline`."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "srdeploy" if name.startswith("srdeploy") else "python -m pipeline"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=_prog(), description="one subcommand per pipeline stage (STAGE --help: its options)")
    _add_debug(parser)
    sub = parser.add_subparsers(dest="stage", metavar="STAGE")
    for name, (_, help_) in STAGES.items():
        sub.add_parser(name, help=help_, add_help=False)
    return parser


def _add_debug(parser: argparse.ArgumentParser) -> None:
    """--debug in every --help: main() takes it off the command line (anywhere on it) before any parser runs."""
    parser.add_argument(DEBUG_FLAG, action="store_true",
                        help="print the traceback of an error (anywhere on the command line)")


def _run_stage(stage: str, rest: list[str]) -> int:
    module_name, help_ = STAGES[stage]
    module = importlib.import_module(module_name)
    stage_parser = _Parser(prog=f"{_prog()} {stage}", description=help_)
    stage_parser.argv = rest
    module.add_arguments(stage_parser)
    _add_debug(stage_parser)
    return int(module.run(stage_parser.parse_args(rest)) or 0)


def _dispatch(argv: list[str]) -> int:
    if not argv:  # no stage: the usage, as for any other incomplete command line
        build_parser().print_help(sys.stderr)
        return 2
    if argv[0] in ("-h", "--help"):
        build_parser().print_help()
        return 0
    if argv[0] not in STAGES:
        build_parser().parse_args(argv[:1])  # raises UsageError naming the valid stages
        raise UsageError(f"unknown stage '{argv[0]}' (choose from: {', '.join(STAGES)})")
    return _run_stage(argv[0], argv[1:])


def _search_current_folder() -> None:
    """`python -m pipeline` finds modules in the current folder (`--model mypkg.net:factory`) because Python puts
    it first on sys.path; the installed `srdeploy` script gets its own folder there instead. Same search for both."""
    cwd = os.getcwd()
    if not any(os.path.abspath(p or os.curdir) == cwd for p in sys.path):
        sys.path.insert(0, cwd)


def _terminate(signum, frame):
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _search_current_folder()
    debug = DEBUG_FLAG in argv
    argv = [a for a in argv if a != DEBUG_FLAG]
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main else None
    try:
        with escaped_output():  # text from users' files never drives the terminal
            return _main(argv, debug)
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def _main(argv: list[str], debug: bool) -> int:
    try:
        return _dispatch(argv)
    except (PipelineError, UsageError) as e:
        if debug:
            traceback.print_exc()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ReportedInterrupt as e:  # the stage already said what was kept and how to resume
        return 143 if e.terminated else 130
    except KeyboardInterrupt as e:
        print("terminated" if isinstance(e, Terminated) else "interrupted", file=sys.stderr)
        return 143 if isinstance(e, Terminated) else 130
    except Exception as e:  # a bug or an unforeseen environment problem: still one line unless asked
        if isinstance(e, ModuleNotFoundError) and e.name == "onnxruntime":  # an install choice, not a bug
            print("error: ONNX Runtime is not installed: pip install 'srdeploy[cpu]', or 'srdeploy[gpu]' on a "
                  "machine with an NVIDIA GPU (one of the two, never both)", file=sys.stderr)
            return 2
        if debug:
            traceback.print_exc()
        missing = missing_extra(e)  # an optional package (PyTorch, ...) this install lacks: say what to install
        if missing is not None:
            print(f"error: {argv[0] if argv and argv[0] in STAGES else 'this command'} needs {missing}",
                  file=sys.stderr)
            return 2
        hint = "" if debug else f" (run with {DEBUG_FLAG} for the traceback)"
        print(f"error: {type(e).__name__}: {first_line(e)}{hint}", file=sys.stderr)
        return 2
