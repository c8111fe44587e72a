"""A clip cut into segments at keyframes (pipeline.sr.segments), run apart and joined by stream copy: every source
frame in exactly one segment (B-frames, open GOPs, VFR, MP4 edit lists), and the joined output the local run's
frame for frame. The same on a real local Ray cluster (2 actors, in a private network namespace as tests/test_ray.py
runs it), with images and clips in one folder."""
from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline.cli import main
from pipeline.sr import Record, load_backend, run_segment
from pipeline.sr.jobs import Job
from pipeline.sr.segments import ClipWork, plan, segment_path
from pipeline.sr.video import plan as plan_clip
from pipeline.sr.video_io import Window, open_input
from pipeline.sr.worker import ImageWorker
from tests.netns import namespace_problem
from tests.video_clips import (
    assert_same_frames,
    audio_of,
    frames_of,
    h264_clip,
    make_clip,
    open_gop_clip,
    stream_facts,
    vfr_clip,
)

NAMESPACE_PROBLEM = namespace_problem()
in_namespace = pytest.mark.skipif(NAMESPACE_PROBLEM is not None, reason=str(NAMESPACE_PROBLEM))
CLIPS = {"bframes_editlist.mp4": h264_clip, "vfr.mkv": vfr_clip, "open_gop.mkv": open_gop_clip}


def _decoded(path: Path, window: Window | None = None) -> list[tuple[int, bytes]]:
    """(pts, RGB bytes) of the frames of the clip (or of one window, read as a segment reads it)."""
    from pipeline.sr.video_io import Frame, probe, read

    info = probe(path)
    return [(it.pts, it.pixels.tobytes()) for it in read(path, info, window or Window(), copy=False)
            if isinstance(it, Frame)]


def _leading_frames(path: Path) -> int:
    """Packets that follow a keyframe in decode order yet are shown before it (an open GOP's leading frames)."""
    leading, key = 0, None
    with open_input(path) as c:
        for p in c.demux(c.streams.video[0]):
            if p.pts is None:
                continue
            if p.is_keyframe:
                key = p.pts
            elif key is not None and p.pts < key:
                leading += 1
    return leading


@pytest.mark.parametrize("name", sorted(CLIPS))
def test_every_source_frame_lands_in_exactly_one_segment(tmp_path, name):
    clip = CLIPS[name](tmp_path / name)
    segments = plan(clip, 1.0)
    assert len(segments) >= 3, segments
    assert segments[0].start is None and segments[-1].end is None
    assert all(a.end == b.start for a, b in zip(segments, segments[1:], strict=False))
    with open_input(clip) as c:
        keys = {p.pts for p in c.demux(c.streams.video[0]) if p.is_keyframe}
    assert all(s.start in keys for s in segments[1:])  # each cut at a keyframe
    if name == "open_gop.mkv":
        assert _leading_frames(clip) > 0  # the clip really has frames shown before their keyframe
    whole = _decoded(clip)
    parts = [_decoded(clip, s.window) for s in segments]
    assert all(parts)
    assert [f for part in parts for f in part] == whole  # same frames, same order, same pixels: none twice or lost


def test_a_short_clip_stays_one_segment(tmp_path):
    clip = make_clip(tmp_path / "short.mp4", "libx264", 32, 32, 45, 30, codec_options={"g": "10"})
    assert len(plan(clip, 1.0)) == 1  # 1.5 s: shorter than two segments


def _segmented(src: Path, dst: Path, fmt: str, codec: str, seconds: float) -> Record:
    """The clip run as an executor runs it: each segment by run_segment (a Ray actor's unit), then the join."""
    backend, _ = load_backend("ort", "srcnn", "fp32", threads=1)
    worker = ImageWorker(backend, "srcnn", 2.0)
    job = Job(src, dst, src.name, fmt)
    rec = Record(job)
    segs = plan(src, seconds)
    files = [segment_path(dst, "test", s.index) for s in segs]
    results = {}
    for s, f in zip(segs, files, strict=True):
        results[s.index] = run_segment(worker, job, {"segment": s.to_json(), "file": str(f), "codec": codec})
        assert "timing" in results[s.index], results[s.index]
    work = ClipWork(rec, plan_clip(job, 2.0, codec, None), segs, files, results)
    work.finish(1.0)
    assert not [p for p in dst.parent.iterdir() if p.name.startswith(".")]  # segment files removed
    return rec


@pytest.mark.parametrize("out_name, codec", [("out.mkv", "ffv1"), ("out.mp4", "h264")])
def test_segments_joined_equal_the_local_run(tmp_path, out_name, codec):
    clip = h264_clip(tmp_path / "in.mp4", seconds=4)
    local = tmp_path / "local" / out_name
    assert main(["sr", str(clip), str(local), "--backend", "ort", "--threads", "1", "--scale", "2", "--codec", codec,
                 "--quiet"]) == 0
    rec = _segmented(clip, tmp_path / "joined" / out_name, out_name[-3:], codec, 1.0)
    assert rec.status == "ok", rec.reason
    joined = rec.job.dst
    assert rec.video["frames"] == len(frames_of(local)) == 120
    assert_same_frames(joined, local, exact=codec == "ffv1")
    assert stream_facts(joined) == stream_facts(local)  # streams, frame rate, rotation, duration
    assert stream_facts(joined)["layout"] == ["video", "audio"] and stream_facts(joined)["rotation"] == 90
    assert np.array_equal(audio_of(joined), audio_of(local))  # the audio once, as it was


# -- on a real local Ray cluster -------------------------------------------------------------------------------------

def _ray(tmp_path: Path, args: list[str]) -> tuple[int, str]:
    pytest.importorskip("ray.data", reason="Ray with Ray Data is not installed (pip install -e '.[cluster]')")
    from tests.test_ray import ray_sr

    return ray_sr(args, Path(os.environ["SRDEPLOY_CACHE"]))


@in_namespace
def test_ray_clip_equals_the_local_run(tmp_path):
    """The issue's clip: 10 s at 30 fps, H.264 with B-frames and 2 s GOPs, AAC, rotation; 2 actors, FFV1 out."""
    clip = h264_clip(tmp_path / "clip.mp4")
    common = ["--backend", "ort", "--threads", "1", "--scale", "2", "--codec", "ffv1"]
    rc, err = _ray(tmp_path, [str(clip), str(tmp_path / "ray.mkv"), "--ray", "--ray-actors", "2", "--summary",
                              str(tmp_path / "ray.json"), *common])
    assert rc == 0, err[-3000:]
    assert main(["sr", str(clip), str(tmp_path / "local.mkv"), "--quiet", "--summary", str(tmp_path / "local.json"),
                 *common]) == 0
    assert_same_frames(tmp_path / "ray.mkv", tmp_path / "local.mkv", exact=True)
    assert stream_facts(tmp_path / "ray.mkv") == stream_facts(tmp_path / "local.mkv")
    assert np.array_equal(audio_of(tmp_path / "ray.mkv"), audio_of(tmp_path / "local.mkv"))
    ray, local = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("ray", "local"))
    assert set(ray) == set(local) and set(ray["images"][0]) == set(local["images"][0])
    assert set(ray["images"][0]["video"]) == set(local["images"][0]["video"])
    assert ray["images"][0]["video"]["frames"] == 300
    [facts] = ray["executor"]["segments"]
    assert facts["input"] == "clip.mp4" and facts["segments"] >= 4 and facts["reused"] == 0  # 2 actors: several each
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # segment files removed


@in_namespace
def test_ray_folder_of_images_and_clips_has_one_summary(tmp_path):
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    vfr_clip(src / "vfr.mkv")
    open_gop_clip(src / "sub" / "open_gop.mkv")
    cv2.imwrite(str(src / "a.png"), np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8))
    (src / "broken.mkv").write_bytes(b"not a video")
    common = ["--backend", "ort", "--threads", "1", "--scale", "2"]
    rc, err = _ray(tmp_path, [str(src), str(tmp_path / "ray"), "--ray", "--ray-actors", "2", "--segment-seconds", "1",
                              "--summary", str(tmp_path / "ray.json"), *common])
    assert rc == 1, err[-3000:]  # the broken clip fails alone
    assert "failed broken.mkv: " in err
    assert main(["sr", str(src), str(tmp_path / "local"), "--quiet", "--summary", str(tmp_path / "local.json"),
                 *common]) == 1
    for rel in ("vfr.mkv", "sub/open_gop.mkv"):
        assert_same_frames(tmp_path / "ray" / rel, tmp_path / "local" / rel, exact=True)  # mkv: FFV1 by default
    assert cv2.imread(str(tmp_path / "ray" / "a.png")).shape == (60, 80, 3)
    ray, local = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("ray", "local"))
    assert ray["counts"] == local["counts"] == {"ok": 3, "failed": 1, "skipped": 0, "ignored": 0}
    assert {s["input"]: s["segments"] > 1 for s in ray["executor"]["segments"]} == {"vfr.mkv": True,
                                                                                    "sub/open_gop.mkv": True}
