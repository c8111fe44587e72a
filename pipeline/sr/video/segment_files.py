"""A clip's finished segments on disk, and whether a later run may trust them.

Each segment is a NUT file beside the clip's output (a hidden name: every Ray node sees the output's folder, never
another's cache), named by the plan: the clip's key and the segment's index, so a --skip-existing run finds what a
killed run finished. Its record (FILE.json, written after FILE) holds what the join needs (every packet's
timestamps) and what proves the file is the one that run wrote: its size, SHA-256, packet count, first and last
pts, and the key. A segment is reused only when its file is a regular file (no link) and matches all of these;
otherwise it is redone, with one line saying which and why.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import av

from pipeline.artifacts.atomic import atomic_write
from pipeline.sr.video import av_io as video_io
from pipeline.sr.videofmt import DEFAULT_PRESET, ENCODER_OPTIONS

FORMAT = 2  # the segment files' layout (2: B-frames kept, each packet's timestamps in the record)


def segment_key(src: Path, identity: dict) -> str:
    """The one key of a clip's segments: the source file (path, size, modification time) and everything that
    changes a segment's bytes. `identity` holds the model files' SHA-256 (`model_files`), backend, precision,
    codec, crf, preset, tiling, scale and the segment plan; the encoder's options (and the default presets, which
    apply when no --preset was given) are added here."""
    st = src.stat()
    codec = identity.get("codec")
    blob = {"format": FORMAT, "src": str(src.absolute()), "size": st.st_size, "mtime": st.st_mtime_ns,
            "encoder": ENCODER_OPTIONS.get(codec or "", {}),
            "default_presets": DEFAULT_PRESET, **identity}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def segment_path(dst: Path, key: str, index: int) -> Path:
    return dst.parent / f".{dst.name}.{key}.seg{index:04d}.{video_io.SEGMENT_MUXER}"


def record_path(segment_file: Path) -> Path:
    return segment_file.with_name(segment_file.name + ".json")


def _sha256(path: Path) -> str:
    """The file's bytes' SHA-256, read without following a link (a link is an OSError)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    h = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _packets(path: Path) -> tuple[int, int | None, int | None]:
    """(video packets, first pts, last pts) as the file demuxes."""
    n, first, last = 0, None, None
    with av.open(str(path), format=video_io.SEGMENT_MUXER) as c:
        for p in c.demux(c.streams.video[0]):
            if p.size:
                n += 1
                first = p.pts if first is None else first
                last = p.pts
    return n, first, last


def facts(path: Path, key: str) -> dict:
    """What proves a segment file is this one: measured on the file as written."""
    n, first, last = _packets(path)
    return {"size": path.stat().st_size, "sha256": _sha256(path), "frames": n, "first_pts": first,
            "last_pts": last, "key": key}


def save(segment_file: Path, key: str, result: dict) -> None:
    """Written after the segment file: the result and the file's facts. A file whose packets are not its frames
    (an encoder that dropped one) is a VideoError, not a record."""
    proof = facts(segment_file, key)
    if proof["frames"] != len(result["packets"]):
        raise video_io.VideoError(f"segment file {segment_file.name} holds {proof['frames']} frames, "
                                  f"{len(result['packets'])} were encoded")
    atomic_write(record_path(segment_file), json.dumps({**result, "file": proof}))


def _mismatch(segment_file: Path, key: str, proof: dict) -> str | None:
    """Why this segment file is not the one its record describes, or None."""
    try:
        st = os.lstat(segment_file)
    except FileNotFoundError:
        return "its file is missing"
    if not stat.S_ISREG(st.st_mode):
        return "its file is not a regular file (a link or other kind)"
    if proof.get("key") != key:
        return "its record belongs to other settings"
    if st.st_size != proof.get("size"):
        return f"its file is {st.st_size} bytes, the record says {proof.get('size')}"
    if _sha256(segment_file) != proof.get("sha256"):
        return "its file's SHA-256 differs from the record's (damaged)"
    try:
        n, first, last = _packets(segment_file)
    except av.FFmpegError as e:
        return f"its file does not demux ({video_io.reason(e)})"
    if (n, first, last) != (proof.get("frames"), proof.get("first_pts"), proof.get("last_pts")):
        return f"its file demuxes to {n} frames (pts {first}..{last}), the record says {proof.get('frames')}"
    return None


def load(segment_file: Path, key: str) -> tuple[dict | None, str | None]:
    """(a finished segment's result, None) when it may be reused; (None, why) when a record is there but the
    segment must be redone; (None, None) when no run finished it."""
    rec_file = record_path(segment_file)
    if not os.path.lexists(rec_file) and not os.path.lexists(segment_file):
        return None, None
    try:
        if not stat.S_ISREG(os.lstat(rec_file).st_mode):
            return None, "its record is not a regular file"
        result = json.loads(rec_file.read_text())
        proof = result["file"]
        if len(result["packets"]) != proof["frames"] or "timing" not in result:
            return None, "its record is incomplete"
    except FileNotFoundError:
        return None, "it has no record (its run was killed while writing it)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"its record is unreadable ({type(e).__name__})"
    try:
        why = _mismatch(segment_file, key, proof)
    except OSError as e:
        why = f"its file cannot be read ({e.strerror or e})"
    return (None, why) if why else (result, None)


def remove(segment_files: list[Path]) -> None:
    for f in segment_files:
        f.unlink(missing_ok=True)
        record_path(f).unlink(missing_ok=True)
