"""Which files the sr stage reads and where each result goes: INPUT (file or folder, recursive) ->
OUTPUT mirroring the tree. Guarantees inputs are never overwritten and outputs are never re-read as
inputs (OUTPUT may lie inside INPUT)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.sr.imageio import FORMAT_EXT, OTHER_IMAGE_EXT, extensions_text, format_of


@dataclass
class Job:
    src: Path
    dst: Path
    rel: str          # path relative to INPUT (how the file is named in logs and the summary)
    fmt: str          # output format key (png, jpg, ...)
    problem: str = ""  # set when the job must fail before decoding (e.g. an output name collision)


@dataclass
class JobList:
    jobs: list[Job]
    ignored: list[str] = field(default_factory=list)  # files without an image extension
    root: Path | None = None


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def _out_name(rel: Path, fmt: str | None) -> tuple[Path, str]:
    if fmt is None:
        return rel, format_of(rel)
    return rel.with_suffix(FORMAT_EXT[fmt]), fmt


def _single_file(src_root: Path, out_root: Path, fmt: str | None) -> JobList:
    if format_of(src_root) is None:
        raise PipelineError(f"input {src_root} is not an image file (extensions: {extensions_text()})")
    if out_root.is_dir() or (format_of(out_root) is None and not out_root.exists()):
        name, f = _out_name(Path(src_root.name), fmt)
        dst = out_root / name
    else:  # OUTPUT names the file to write
        named = format_of(out_root)
        if fmt is not None and named is not None and named != fmt:
            raise PipelineError(f"OUTPUT {out_root} names a {named} file but --format {fmt} was given; "
                                f"name it {FORMAT_EXT[fmt]} or leave out --format")
        dst, f = out_root, fmt or named or format_of(src_root)
    if dst.resolve() == src_root.resolve():
        raise PipelineError(f"output {dst} is the input file; choose another OUTPUT (inputs are never overwritten)")
    return JobList([Job(src_root, dst, src_root.name, f)], [], src_root.parent)


def _walk(src_root: Path, out_root: Path, fmt: str | None) -> JobList:
    """Every file under INPUT: image files become jobs, others are listed as ignored."""
    jobs: list[Job] = []
    ignored: list[str] = []
    out_abs = out_root.resolve()
    out_in_src = _inside(out_abs, src_root.resolve())
    for dirpath, dirnames, filenames in os.walk(src_root, followlinks=False):
        here = Path(dirpath)
        # Never descend into OUTPUT (when it lies inside INPUT): results are not inputs.
        dirnames[:] = sorted(d for d in dirnames if not (out_in_src and _inside((here / d).resolve(), out_abs)))
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(src_root)
            if format_of(path) is None:
                if not (name.startswith(".") and name.endswith(".part")):  # our own temp files
                    ignored.append(rel.as_posix())
                continue
            out_rel, f = _out_name(rel, fmt)
            jobs.append(Job(path, out_root / out_rel, rel.as_posix(), f))
    return JobList(jobs, ignored, src_root)


def _flag_conflicts(jobs: list[Job]) -> None:
    """An output path that is an input file, or that two inputs map to (a.png + a.jpg -> a.png)."""
    inputs = {j.src.resolve() for j in jobs}
    by_dst: dict[Path, list[Job]] = {}
    for j in jobs:
        d = j.dst.resolve()
        if d in inputs:
            j.problem = f"output path {j.dst} is an input file (inputs are never overwritten)"
        else:
            by_dst.setdefault(d, []).append(j)
    for group in by_dst.values():  # every input of a collision fails: none is written, none silently wins
        if len(group) > 1:
            names = " and ".join(j.rel for j in group)
            both = "both" if len(group) == 2 else "all"
            for j in group:
                j.problem = f"{names} would {both} write {j.dst}; rename one (or use another --format)"


def discover(input_path: str | Path, output_path: str | Path, fmt: str | None = None) -> JobList:
    """Jobs for INPUT -> OUTPUT. Raises PipelineError (one line) for unusable arguments.

    OUTPUT is the file to write when INPUT is one image and OUTPUT ends in an extension we write and is not an
    existing folder; otherwise it is a folder. An OUTPUT ending in an image extension we do not write (.gif, ...)
    is refused rather than made a folder of that name."""
    src_root = Path(input_path)
    out_root = Path(output_path)
    if not src_root.exists():
        raise PipelineError(f"input not found: {src_root}")
    if out_root.suffix.lower() in OTHER_IMAGE_EXT and not out_root.is_dir():
        raise PipelineError(f"OUTPUT {out_root} names a {out_root.suffix.lower()[1:]} image, a format sr does not "
                            f"write (extensions: {extensions_text()})")
    if src_root.is_file():
        return _single_file(src_root, out_root, fmt)
    if not src_root.is_dir():
        raise PipelineError(f"input {src_root} is neither a file nor a folder")
    if out_root.resolve() == src_root.resolve():
        raise PipelineError(f"OUTPUT {out_root} is the INPUT folder; choose another folder "
                            f"(inputs are never overwritten)")
    if out_root.exists() and not out_root.is_dir():
        raise PipelineError(f"OUTPUT {out_root} is a file; give a folder for a folder INPUT")
    found = _walk(src_root, out_root, fmt)
    _flag_conflicts(found.jobs)
    return found
