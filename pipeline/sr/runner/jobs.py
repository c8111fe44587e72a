"""Which files the sr stage reads and where each result goes: INPUT (file or folder, recursive) ->
OUTPUT mirroring the tree. Images and videos (pipeline.sr.videofmt) are both jobs; a video keeps its container
unless a single-file OUTPUT names another. Guarantees inputs are never overwritten and outputs are never re-read as
inputs: an OUTPUT folder inside the INPUT folder is refused (a later run over INPUT would read its results back), and
a job whose output would land inside INPUT (INPUT inside OUTPUT, mirrored into itself) fails on its own."""
from __future__ import annotations

import difflib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.errors import PipelineError
from pipeline.images.imageio import FORMAT_EXT, FORMATS, OTHER_IMAGE_EXT, extensions_text, format_of
from pipeline.sr.videofmt import VIDEO_FORMATS, video_format


@dataclass
class Job:
    src: Path
    dst: Path
    rel: str          # path relative to INPUT (how the file is named in logs and the summary)
    fmt: str          # output format key (png, jpg, ...; mp4, mkv, ... for a video)
    problem: str = ""  # set when the job must fail before decoding (e.g. an output name collision)

    @property
    def video(self) -> bool:
        return self.fmt in VIDEO_FORMATS.values()


@dataclass
class JobList:
    jobs: list[Job]
    ignored: list[str] = field(default_factory=list)  # files without an image or video extension
    root: Path | None = None
    out_root: Path | None = None  # OUTPUT, for a folder run

    @property
    def videos(self) -> list[Job]:
        return [j for j in self.jobs if j.video]


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def _out_name(rel: Path, fmt: str | None) -> tuple[Path, str]:
    if video_format(rel) is not None:  # --format is for images; a video keeps its container
        return rel, video_format(rel)
    if fmt is None:
        return rel, format_of(rel)
    return rel.with_suffix(FORMAT_EXT[fmt]), fmt


def known_extensions() -> str:
    """What sr reads, as messages list it: the image extensions, then the video ones."""
    return f"{extensions_text()}; videos {', '.join(VIDEO_FORMATS)}"


def _single_video(src_root: Path, out_root: Path) -> tuple[Path, str]:
    if out_root.is_dir() or (format_of(out_root) is None and video_format(out_root) is None
                             and not out_root.exists()):
        return out_root / src_root.name, video_format(src_root)
    named = video_format(out_root)
    if named is None:
        raise PipelineError(f"OUTPUT {out_root} is not a video file name for the video {src_root} "
                            f"(extensions: {', '.join(VIDEO_FORMATS)})")
    return out_root, named


def _single_file(src_root: Path, out_root: Path, fmt: str | None) -> JobList:
    if video_format(src_root) is not None:
        if fmt is not None:
            raise PipelineError(f"--format {fmt} applies to images; {src_root} is a video (name OUTPUT with the "
                                f"container you want, e.g. .mkv)")
        dst, f = _single_video(src_root, out_root)
        if dst.resolve() == src_root.resolve():
            raise PipelineError(f"output {dst} is the input file; choose another OUTPUT (inputs are never "
                                f"overwritten)")
        return JobList([Job(src_root, dst, src_root.name, f)], [], src_root.parent)
    if format_of(src_root) is None:
        raise PipelineError(f"input {src_root} is not an image or video file (extensions: {known_extensions()})")
    if out_root.is_dir() or (format_of(out_root) is None and not out_root.exists()):
        name, f = _out_name(Path(src_root.name), fmt)
        dst = out_root / name
    else:  # OUTPUT names the file to write
        named = format_of(out_root)
        if named is None:  # an existing notes.txt would be replaced by image bytes
            raise PipelineError(f"OUTPUT {out_root} is an existing file that is not an image (extensions: "
                                f"{extensions_text()}); name an image file or a folder")
        if fmt is not None and named is not None and named != fmt:
            raise PipelineError(f"OUTPUT {out_root} names a {named} file but --format {fmt} was given; "
                                f"name it {FORMAT_EXT[fmt]} or leave out --format")
        dst, f = out_root, fmt or named or format_of(src_root)
    if dst.resolve() == src_root.resolve():
        raise PipelineError(f"output {dst} is the input file; choose another OUTPUT (inputs are never overwritten)")
    return JobList([Job(src_root, dst, src_root.name, f)], [], src_root.parent)


def _real(path: Path) -> Path:
    """Where `path` leads; unlike Path.resolve (Python < 3.13) a symlink loop is not a RuntimeError."""
    return Path(os.path.realpath(path))


def input_problem(path: Path, src_root: Path) -> str:
    """Why a file found under INPUT is not read, or '': only regular files are read, and like folder links,
    file links leading outside INPUT are not followed."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:  # ELOOP: a symlink loop; ENOENT: a dangling link
        return f"cannot be read: {e.strerror or e}"
    if not stat.S_ISREG(mode):
        return "not a regular file (a FIFO, socket or device); only regular files are read"
    if path.is_symlink() and not _inside(_real(path), _real(src_root)):
        return "a link leading outside INPUT (not followed, like links to folders)"
    return ""


def output_inside_input(src_root: Path, out_root: Path) -> bool:
    """OUTPUT is the INPUT folder or lies inside it (links resolved): its results would be a later run's inputs."""
    return _inside(_real(out_root), _real(src_root))


def _walk(src_root: Path, out_root: Path, fmt: str | None) -> JobList:
    """Every file under INPUT: image files become jobs, others are listed as ignored."""
    jobs: list[Job] = []
    ignored: list[str] = []
    for dirpath, dirnames, filenames in os.walk(src_root, followlinks=False):
        here = Path(dirpath)
        dirnames.sort()
        for name in sorted(filenames):
            path = here / name
            rel = path.relative_to(src_root)
            if format_of(path) is None and video_format(path) is None:
                if not (name.startswith(".") and name.endswith(".part")):  # our own temp files
                    ignored.append(rel.as_posix())
                continue
            out_rel, f = _out_name(rel, fmt)
            jobs.append(Job(path, out_root / out_rel, rel.as_posix(), f, input_problem(path, src_root)))
    return JobList(jobs, ignored, src_root)


def _flag_conflicts(jobs: list[Job], src_root: Path) -> None:
    """An output path that is an input file, that lies inside INPUT (INPUT inside OUTPUT: x/a.png -> OUTPUT/x/a.png,
    which a later run over INPUT would read back), or that two inputs map to (a.png + a.jpg -> a.png)."""
    inputs = {_real(j.src) for j in jobs}
    src_real = _real(src_root)
    by_dst: dict[Path, list[Job]] = {}
    for j in jobs:
        d = _real(j.dst)
        if d in inputs:
            j.problem = f"output path {j.dst} is an input file (inputs are never overwritten)"
        elif _inside(d, src_real):
            j.problem = (f"output path {j.dst} lies inside INPUT {src_root} (a later run would read it back as "
                         "an input)")
        else:
            by_dst.setdefault(d, []).append(j)
    for group in by_dst.values():  # every input of a collision fails: none is written, none silently wins
        if len(group) > 1:
            names = " and ".join(j.rel for j in group)
            both = "both" if len(group) == 2 else "all"
            for j in group:
                j.problem = f"{names} would {both} write {j.dst}; rename one (or use another --format)"


def output_link_problem(dst: Path, out_root: Path) -> str:
    """Why `dst` would be written through a folder link already inside OUTPUT (into some other place), or ''."""
    try:
        parts = dst.relative_to(out_root).parts[:-1]
    except ValueError:
        return ""
    here = out_root
    for part in parts:
        here = here / part
        if here.is_symlink():
            return f"{here} is a link inside OUTPUT; results are not written through links"
    return ""


def check_data_loss(found: JobList, summary: str | Path | None) -> None:
    """Outputs that would destroy data, found before any work: a --summary that is an input file is refused
    (one PipelineError line); jobs whose output goes through a folder link inside OUTPUT fail on their own."""
    if summary is not None:
        target = _real(Path(summary))
        for j in found.jobs:
            if _real(j.src) == target:
                raise PipelineError(f"--summary {summary} is the input image {j.rel}; give another file "
                                    "(inputs are never overwritten)")
            if _real(j.dst) == target:
                raise PipelineError(f"--summary {summary} is the output of {j.rel}; give another file "
                                    "(the summary never replaces a result)")
    root = found.out_root
    for j in found.jobs:
        if not j.problem and root is not None:
            j.problem = output_link_problem(j.dst, root)


def check_output_suffix(raw: str, out_root: Path) -> None:
    """Refuse an OUTPUT ending in a suffix of 2-5 letters sr does not write (`out.jgp`, `out.txt`): a typo would
    otherwise become a folder of that name. An existing folder, a name ending with a slash, an existing file (its
    own message) and a suffix with digits or other characters (`runs/v1.2`) are left as they are."""
    suffix = out_root.suffix.lower()
    letters = suffix[1:]
    if not (2 <= len(letters) <= 5 and letters.isascii() and letters.isalpha()):
        return
    if format_of(out_root) or video_format(out_root) or raw.endswith(("/", os.sep)) or out_root.exists():
        return
    written = sorted({*FORMATS, *VIDEO_FORMATS})
    close = difflib.get_close_matches(suffix, written, n=1, cutoff=0.6)
    guess = f"did you mean {close[0]}? " if close else f"sr writes {', '.join(written)}; "
    raise PipelineError(f"OUTPUT {raw} ends in {suffix}, which sr does not write ({guess}for a folder, end it "
                        f"with /)")


def discover(input_path: str | Path, output_path: str | Path, fmt: str | None = None, *,
             summary: str | Path | None = None) -> JobList:
    """Jobs for INPUT -> OUTPUT. Raises PipelineError (one line) for unusable arguments.

    OUTPUT is the file to write when INPUT is one image (or video) and OUTPUT ends in an extension we write and is
    not an existing folder; otherwise it is a folder. An OUTPUT ending in an image extension we do not write (.gif,
    ...) or another suffix of 2-5 letters (check_output_suffix) is refused rather than made a folder of that
    name."""
    src_root = Path(input_path)
    out_root = Path(output_path)
    if not src_root.exists():
        raise PipelineError(f"input not found: {src_root}")
    if out_root.suffix.lower() in OTHER_IMAGE_EXT and not out_root.is_dir():
        raise PipelineError(f"OUTPUT {out_root} names a {out_root.suffix.lower()[1:]} image, a format sr does not "
                            f"write (extensions: {extensions_text()})")
    check_output_suffix(str(output_path), out_root)
    if src_root.is_file():
        found = _single_file(src_root, out_root, fmt)
        check_data_loss(found, summary)
        return found
    if not src_root.is_dir():
        raise PipelineError(f"input {src_root} is neither a file nor a folder")
    if out_root.resolve() == src_root.resolve():
        raise PipelineError(f"OUTPUT {out_root} is the INPUT folder; choose another folder "
                            f"(inputs are never overwritten)")
    if output_inside_input(src_root, out_root):
        raise PipelineError(f"OUTPUT {out_root} lies inside the INPUT folder {src_root}; choose a folder outside it "
                            f"(a later run over INPUT would read these results back as inputs)")
    if out_root.exists() and not out_root.is_dir():
        raise PipelineError(f"OUTPUT {out_root} is a file; give a folder for a folder INPUT")
    found = _walk(src_root, out_root, fmt)
    found.out_root = out_root
    _flag_conflicts(found.jobs, src_root)
    check_data_loss(found, summary)
    return found
