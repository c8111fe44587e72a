"""A clip cut into segments at keyframes (pipeline.sr.video.segments), run apart and joined by stream copy: every source
frame in exactly one segment (B-frames, open GOPs, VFR, MP4 edit lists), and the joined output the local run's
frame for frame. The same on a real local Ray cluster (2 actors, in a private network namespace as tests/test_ray.py
runs it), with images and clips in one folder."""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from pipeline import backends
from pipeline.cli import main
from pipeline.native import cpu
from pipeline.sr import Record, run_segment
from pipeline.sr.runner.jobs import Job
from pipeline.sr.runner.worker import ImageWorker
from pipeline.sr.video.av_io import Window, open_input
from pipeline.sr.video.clip import plan as plan_clip
from pipeline.sr.video.segment_files import segment_path
from pipeline.sr.video.segments import ClipWork, plan
from tests.netns import namespace_problem
from tests.video_clips import (
    assert_same_frames,
    audio_of,
    frames_of,
    h264_clip,
    make_clip,
    open_gop_clip,
    repeated_pts_clip,
    stream_facts,
    vfr_clip,
)

NAMESPACE_PROBLEM = namespace_problem()
in_namespace = pytest.mark.skipif(NAMESPACE_PROBLEM is not None, reason=str(NAMESPACE_PROBLEM))
CLIPS = {"bframes_editlist.mp4": h264_clip, "vfr.mkv": vfr_clip, "open_gop.mkv": open_gop_clip}


def _decoded(path: Path, window: Window | None = None) -> list[tuple[int, bytes]]:
    """(pts, RGB bytes) of the frames of the clip (or of one window, read as a segment reads it)."""
    from pipeline.sr.video.av_io import Frame, probe, read

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
    backend = backends.create("ort", "srcnn", "fp32", threads=1)
    worker = ImageWorker(backend, "srcnn", 2.0)
    job = Job(src, dst, src.name, fmt)
    rec = Record(job)
    segs = plan(src, seconds)
    files = [segment_path(dst, "test", s.index) for s in segs]
    results = {}
    for s, f in zip(segs, files, strict=True):
        results[s.index] = run_segment(worker, job, {"segment": s.to_json(), "file": str(f), "codec": codec,
                                                     "key": "test"})
        assert "timing" in results[s.index], results[s.index]
    work = ClipWork(rec, plan_clip(job, 2.0, codec, None), segs, files, results)
    work.finish(1.0)
    assert not [p for p in dst.parent.iterdir() if p.name.startswith(".")]  # segment files removed
    return rec


@pytest.mark.parametrize("out_name, codec", [("out.mkv", "ffv1"), ("out.mp4", "h264"), ("out.mov", "h265")])
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
    assert stream_facts(joined)["colour"] == ((0, 2) if codec == "ffv1" else (1, 1)) + (1, 1)  # RGB, or BT.709 kept
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
    repeated_pts_clip(src / "repeated.mkv")  # every 7th pts repeated: the same frames as the local run's
    cv2.imwrite(str(src / "a.png"), np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8))
    (src / "broken.mkv").write_bytes(b"not a video")
    common = ["--backend", "ort", "--threads", "1", "--scale", "2"]
    rc, err = _ray(tmp_path, [str(src), str(tmp_path / "ray"), "--ray", "--ray-actors", "2", "--segment-seconds", "1",
                              "--summary", str(tmp_path / "ray.json"), *common])
    assert rc == 1, err[-3000:]  # the broken clip fails alone
    assert "failed broken.mkv: " in err
    assert main(["sr", str(src), str(tmp_path / "local"), "--quiet", "--summary", str(tmp_path / "local.json"),
                 *common]) == 1
    for rel in ("vfr.mkv", "sub/open_gop.mkv", "repeated.mkv"):
        assert_same_frames(tmp_path / "ray" / rel, tmp_path / "local" / rel, exact=True)  # mkv: FFV1 by default
    assert cv2.imread(str(tmp_path / "ray" / "a.png")).shape == (60, 80, 3)
    ray, local = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("ray", "local"))
    assert ray["counts"] == local["counts"] == {"ok": 4, "failed": 1, "skipped": 0, "ignored": 0}
    assert {s["input"]: s["segments"] > 1 for s in ray["executor"]["segments"]} == {
        "vfr.mkv": True, "sub/open_gop.mkv": True, "repeated.mkv": True}


# A user's net (`package.module:factory`) that counts the 40-pixel-wide frames it upscales (the driver's probes are
# 48x48) and, at frame KILL_AT, SIGKILLs either its own process (an actor) or the driver (pid in DRIVER_PID_FILE):
# once per test, whoever creates the marker file first.
KILLING_NET = """
import os, signal, time, torch

class KillingNet(torch.nn.Module):
    scale = 2

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 12, 3, padding=1)

    def forward(self, x):
        if x.shape[-1] == 40:
            with open(os.environ["FRAME_COUNTER"], "ab") as f:
                f.write(b".")
            if os.path.getsize(os.environ["FRAME_COUNTER"]) >= int(os.environ["KILL_AT"]):
                try:
                    os.close(os.open(os.environ["KILL_MARKER"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                except FileExistsError:
                    pass
                else:
                    who = os.environ["KILL"]
                    pid = os.getpid() if who == "actor" else int(open(os.environ["DRIVER_PID_FILE"]).read())
                    os.kill(pid, signal.SIGKILL)
                    time.sleep(5)  # the driver's death reaches its actors meanwhile
        return torch.nn.functional.pixel_shuffle(self.conv(x), 2)

def factory():
    return KillingNet().eval()
"""


def _killing_run(tmp_path: Path, who: str, kill_at: int):
    """(the clip, the args of a --ray run of it with the killing net, its environment)."""
    (tmp_path / "killing_net.py").write_text(KILLING_NET)
    clip = make_clip(tmp_path / "clip.mkv", "libx264", 40, 24, 240, 30, audio="aac",
                     codec_options={"g": "30", "x264-params": "scenecut=0"})  # 8 segments of 30 frames
    args = [str(clip), str(tmp_path / "out" / "ray.mkv"), "--ray", "--ray-actors", "2", "--segment-seconds", "1",
            "--model", "killing_net:factory", "--backend", "torch", "--scale", "2", "--threads", "1", "--quiet"]
    env = {"PYTHONPATH": f"{Path(__file__).resolve().parents[1]}{os.pathsep}{tmp_path}", "KILL": who,
           "KILL_AT": str(kill_at), "KILL_MARKER": str(tmp_path / "killed"), "FRAME_COUNTER": str(tmp_path / "n"),
           "DRIVER_PID_FILE": str(tmp_path / "driver.pid")}
    return clip, args, env


def _local_killing_net(tmp_path: Path, clip: Path, env: dict, monkeypatch) -> Path:
    """The same net run locally (its marker exists by now: it kills nothing)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    local = tmp_path / "local.mkv"
    assert main(["sr", str(clip), str(local), "--model", "killing_net:factory", "--backend", "torch", "--scale", "2",
                 "--threads", "1", "--quiet"]) == 0
    return local


@in_namespace
def test_a_killed_actors_segment_is_redone(tmp_path, monkeypatch):
    pytest.importorskip("ray.data", reason="Ray with Ray Data is not installed (pip install -e '.[cluster]')")
    from tests.test_ray import _finish, _start

    clip, args, env = _killing_run(tmp_path, "actor", 45)  # mid-way through the second segment an actor took
    rc, err = _finish(_start([*args, "--summary", str(tmp_path / "run.json")], Path(os.environ["SRDEPLOY_CACHE"]),
                             env))
    assert (tmp_path / "killed").exists(), f"no actor was killed mid-run (rc {rc}): {err[-2000:]}"
    assert rc == 0, err[-2000:]
    assert json.loads((tmp_path / "run.json").read_text())["counts"]["ok"] == 1
    assert_same_frames(tmp_path / "out" / "ray.mkv", _local_killing_net(tmp_path, clip, env, monkeypatch), exact=True)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ray.mkv"]  # no segment or temp file left


def _settled(counter: Path) -> float:
    """Seconds until the frame counter stops growing: no actor of the killed run upscales any more."""
    import time

    t0 = time.monotonic()
    for _ in range(60):
        size = os.path.getsize(counter)
        time.sleep(1)
        if os.path.getsize(counter) == size:
            return time.monotonic() - t0
    pytest.fail("the killed run's actors went on upscaling for a minute")


def damage(files: list[Path], elsewhere: Path) -> None:
    """Each finished segment damaged in one of the ways a disk, a user or a hostile folder does: cut to half its
    size, 64 bytes flipped, replaced by a link to a copy outside the output folder, its record's frame count
    changed."""
    elsewhere.mkdir(exist_ok=True)
    for i, f in enumerate(files):
        data = f.read_bytes()
        if i % 4 == 0:
            f.write_bytes(data[:len(data) // 2])
        elif i % 4 == 1:
            mid = len(data) // 2
            f.write_bytes(data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 64]) + data[mid + 64:])
        elif i % 4 == 2:
            (elsewhere / f.name).write_bytes(data)
            f.unlink()
            f.symlink_to(elsewhere / f.name)
        else:
            record = f.with_name(f.name + ".json")
            doc = json.loads(record.read_text())
            doc["file"]["frames"] += 1
            record.write_text(json.dumps(doc))


@in_namespace
def test_a_killed_driver_ends_its_actors_and_damaged_leftovers_are_redone(tmp_path, monkeypatch):
    pytest.importorskip("ray.data", reason="Ray with Ray Data is not installed (pip install -e '.[cluster]')")
    import signal

    from tests.test_ray import _finish, _start

    clip, args, env = _killing_run(tmp_path, "driver", 150)  # past 2 actors x 30-frame segments: some are done
    cache = Path(os.environ["SRDEPLOY_CACHE"])
    proc = _start(args, cache, env)
    (tmp_path / "driver.pid").write_text(str(proc.pid))
    rc, err = _finish(proc)
    try:
        assert rc == -signal.SIGKILL and (tmp_path / "killed").exists(), err[-2000:]
        assert _settled(tmp_path / "n") < 10  # the actors end themselves with their driver, the cluster still up
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the local cluster the dead driver started
    out = tmp_path / "out"
    made = sorted(p for p in out.iterdir() if p.name.endswith(".nut") and (out / (p.name + ".json")).exists())
    assert made and not (out / "ray.mkv").exists()
    damage(made, tmp_path / "elsewhere")
    n_before = os.path.getsize(tmp_path / "n")
    rc, err = _finish(_start([*args, "--skip-existing", "--summary", str(tmp_path / "again.json")], cache, env))
    assert rc == 0, err[-2000:]
    assert "Traceback" not in err
    [facts] = json.loads((tmp_path / "again.json").read_text())["executor"]["segments"]
    assert facts["reused"] == 0 and facts["redone"] == len(made)  # each damaged one redone, none joined as it was
    assert os.path.getsize(tmp_path / "n") - n_before == 240
    assert_same_frames(out / "ray.mkv", _local_killing_net(tmp_path, clip, env, monkeypatch), exact=True)
    assert sorted(p.name for p in out.iterdir()) == ["ray.mkv"]


@in_namespace
def test_ray_precision_auto_runs_the_drivers_pick_on_every_actor(tmp_path, monkeypatch):
    # bf16 switched off: torch's only CPU candidate is then fp32 on every CPU kind (which timing wins never matters)
    monkeypatch.setenv(cpu.BF16_ENV, "0")
    src = tmp_path / "in"
    src.mkdir()
    for i in range(4):
        cv2.imwrite(str(src / f"{i}.png"), np.random.default_rng(i).integers(0, 256, (24, 32, 3), dtype=np.uint8))
    make_clip(src / "clip.mkv", "libx264", 32, 24, 60, 30, codec_options={"g": "15"})
    rc, err = _ray(tmp_path, [str(src), str(tmp_path / "out"), "--ray", "--ray-actors", "2", "--backend", "torch",
                              "--precision", "auto", "--scale", "2", "--threads", "1", "--segment-seconds", "0.5",
                              "--summary", str(tmp_path / "run.json")])
    assert rc == 0, err[-3000:]
    lines = err.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("sr: "))
    assert "precision auto picked torch fp32 on the driver" in lines[first]
    assert lines[first + 1].startswith("precision auto: torch fp32 is the fastest within budget here")
    s = json.loads((tmp_path / "run.json").read_text())
    assert s["counts"]["ok"] == 5 and len(s["executor"]["actor_processes"]) == 2  # both actors ran work
    # one backend described by every actor (the summary joins the distinct ones with ';'): the pick
    assert ";" not in s["backend"] and s["backend"].startswith("torch (cpu, fp32"), s["backend"]


def test_a_clip_the_output_cannot_hold_is_refused_before_ray_starts(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray.data", reason="Ray with Ray Data is not installed (pip install -e '.[cluster]')")
    import pipeline.cluster.connect as connect

    clip = make_clip(tmp_path / "clip.mkv", "libx264", 32, 24, 10, 10, audio="aac")

    def no_cluster(*a, **k):  # a guard, not a stand-in: the run must end before it would start a cluster
        raise AssertionError("Ray was started")

    monkeypatch.setattr(connect, "connect", no_cluster)
    assert main(["sr", str(clip), str(tmp_path / "out.webm"), "--ray", "--backend", "ort", "--scale", "2"]) == 2
    assert capsys.readouterr().err == ("error: clip.mkv: audio aac cannot be copied into .webm (write .mkv, which "
                                       "holds it; --audio drop leaves the audio out)\n")
    assert not (tmp_path / "out.webm").exists()
