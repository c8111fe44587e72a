"""The folder super-resolution stage.

    upscale(input, output, ...) -> Summary    the stage's API (pipeline.sr.api; the CLI calls it)
    ImageWorker(backend, model, scale, ...)   the per-image unit: .process(job) -> Record

    api        options -> backend -> scheduler -> Summary    settings   option checks, model resolution
    scheduler  decode pool, batching, bounded write queue    worker     decode/plan/infer/encode one image
    jobs       INPUT -> OUTPUT file mapping                  records    Record, Summary (the JSON)
    tiling     tiles that reproduce whole-image inference    imageio    files <-> pixels
    png        the PNG writer (Up filter + ISA-L deflate)
    bicubic    plain bicubic (alpha, baseline)               reference  --reference scores
    console    what is printed (--quiet hides, --verbose adds)   preflight  writable outputs, overwrite count
"""
from pipeline.sr.api import load_backend, upscale
from pipeline.sr.jobs import Job, discover
from pipeline.sr.records import Record, Summary
from pipeline.sr.worker import ImageWorker

__all__ = ["ImageWorker", "Job", "Record", "Summary", "discover", "load_backend", "upscale"]
