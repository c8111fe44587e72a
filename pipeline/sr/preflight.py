"""What the sr stage checks once its jobs are known and before it loads a backend or reads an image: every place it
will write can be written (OUTPUT, --summary, the artifact cache when it may export), and how many outputs a run
will overwrite. Each problem is one PipelineError line, so no work is done only to fail at the end."""
from __future__ import annotations

import os
from pathlib import Path

from pipeline.artifacts.atomic import folder_problem
from pipeline.artifacts.cache import cache_dir, check_cache_writable
from pipeline.errors import PipelineError
from pipeline.sr.runner.jobs import JobList


def check_writable(found: JobList, output, summary, *, uses_cache: bool) -> None:
    """OUTPUT (the folder all outputs go under), --summary's folder and, when the run may export on first use, the
    cache ($SRDEPLOY_CACHE)."""
    dsts = [j.dst for j in found.jobs if not j.problem]
    if dsts:
        top = Path(os.path.commonpath([str(d.parent.absolute()) for d in dsts]))
        problem = folder_problem(top)
        if problem:
            where = "" if top == Path(output).absolute() else ": its folder"
            raise PipelineError(f"OUTPUT {output}{where} {problem}; nothing was done")
    if summary is not None:
        problem = folder_problem(Path(summary).parent)
        if problem:
            raise PipelineError(f"--summary {summary}: its folder {problem}; nothing was done")
    if uses_cache and not cache_dir().is_dir():  # an existing (maybe read-only, shared) cache is checked on export
        check_cache_writable()


def overwrites(found: JobList, skip_existing: bool) -> int:
    """How many outputs already exist and will be replaced (none with --skip-existing)."""
    if skip_existing:
        return 0
    return sum(1 for j in found.jobs if not j.problem and j.dst.exists())
