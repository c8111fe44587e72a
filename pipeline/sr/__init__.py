"""The folder super-resolution stage.

    upscale(input, output, ...) -> Summary    the stage's Python API (pipeline.sr.api)
    run(RunOptions, executor) -> Summary      one run: plan -> triage -> executor -> Summary -> report (the CLI's)
    ImageWorker(backend, model, scale, ...)   the per-image unit: .process(job) -> Record

    run        plan, executors' protocol, the report   local      the local executor (threads, videos)
    options    RunOptions, the typed run options       settings   option checks, model resolution
    scheduler  decode pool, batching, bounded write queue    worker     decode/plan/infer/encode one image
    jobs       INPUT -> OUTPUT file mapping                  records    Record, RecordLog, Summary (the JSON)
    tiling     tiles that reproduce whole-image inference    imageio    files <-> pixels
    png        the PNG writer (Up filter + ISA-L deflate)
    bicubic    plain bicubic (alpha, baseline)               reference  --reference scores
    console    what is printed (--quiet hides, --verbose adds)   preflight  writable outputs, overwrite count

Code outside this package imports only the names below (an import-linter contract in pyproject.toml).
"""
from pipeline.sr.api import run_local, upscale
from pipeline.sr.jobs import Job, discover
from pipeline.sr.local import load_backend
from pipeline.sr.options import RunOptions
from pipeline.sr.records import Record, Summary
from pipeline.sr.run import ExecutorLost, ModelChoice, Plan, Started, resolve_model, run
from pipeline.sr.worker import ImageWorker, write_output

__all__ = ["ExecutorLost", "ImageWorker", "Job", "ModelChoice", "Plan", "Record", "RunOptions", "Started",
           "Summary", "discover", "load_backend", "resolve_model", "run", "run_local", "upscale",
           "write_output"]
