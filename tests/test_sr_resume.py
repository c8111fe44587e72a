"""Video jobs you can resume and trust (pipeline.sr.video.segments on local runs): a killed local run resumes from its
finished segments, each verified before it is joined (damaged ones redone, one line each); one writer per output;
a full disk in the join keeps the finished segments; repeated timestamps read the same on every path; B-frames
survive the segments."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import av
import pytest

from pipeline.cli import main
from tests.test_sr_segments import KILLING_NET, damage
from tests.video_clips import assert_same_frames, frames_of, h264_clip, make_clip, repeated_pts_clip

REPO = Path(__file__).resolve().parents[1]
RUN_LIMIT_S = 300


def _run(args: list[str], env: dict, wait: bool = True):
    """`python -m pipeline sr ARGS` in a process of its own (the killing net may kill it)."""
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "sr", *map(str, args)], cwd=REPO,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if not wait:
        return proc
    _, err = proc.communicate(timeout=RUN_LIMIT_S)
    return proc.returncode, err


def _net_env(tmp_path: Path, kill_at: int, slow_s: float = 0.0) -> dict:
    (tmp_path / "killing_net.py").write_text(KILLING_NET.replace(
        "        return torch.nn.functional.pixel_shuffle",
        "        time.sleep(float(os.environ.get('SLOW_S', '0')))\n        return torch.nn.functional.pixel_shuffle"))
    return {"PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}", "KILL": "actor", "KILL_AT": str(kill_at),
            "KILL_MARKER": str(tmp_path / "killed"), "FRAME_COUNTER": str(tmp_path / "n"), "SLOW_S": str(slow_s)}


def _clip(tmp_path: Path) -> Path:
    """4 s, 40x24 H.264 with B-frames, a keyframe each half second, AAC: 8 segments of 15 frames at
    --segment-seconds 0.5."""
    return make_clip(tmp_path / "clip.mp4", "libx264", 40, 24, 120, 30, audio="aac",
                     codec_options={"g": "15", "bf": "2", "x264-params": "scenecut=0"})


NET = ["--model", "killing_net:factory", "--backend", "torch", "--scale", "2", "--threads", "1"]


def _local_whole(tmp_path: Path, clip: Path, env: dict, monkeypatch) -> Path:
    """The same net over the whole clip in this process, without segments (its marker exists: it kills nothing)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    whole = tmp_path / "whole.mkv"
    assert main(["sr", str(clip), str(whole), *NET, "--quiet"]) == 0
    return whole


def test_a_killed_local_run_resumes_from_its_verified_segments(tmp_path, monkeypatch):
    clip, out = _clip(tmp_path), tmp_path / "out" / "c.mkv"
    env = _net_env(tmp_path, 68)  # mid-way through the fifth segment
    args = [clip, out, *NET, "--segment-seconds", "0.5"]
    rc, err = _run(args, env)
    assert rc == -signal.SIGKILL and (tmp_path / "killed").exists(), err[-2000:]
    made = sorted(p for p in out.parent.iterdir() if p.name.endswith(".nut") and Path(f"{p}.json").exists())
    assert len(made) == 4 and not out.exists()
    damage(made[1:], tmp_path / "elsewhere")  # the first stays as it was written
    n_before = os.path.getsize(tmp_path / "n")
    rc, err = _run([*args, "--skip-existing", "--summary", tmp_path / "again.json"], env)
    assert rc == 0 and "Traceback" not in err, err[-2000:]
    assert "taking 1 segment(s) a killed earlier run finished, each verified (--skip-existing)" in err
    why = [ln.split(" is redone: ", 1)[1] for ln in err.splitlines() if " is redone: " in ln]
    assert len(why) == 3 and why[0].startswith("its file is ") and "bytes, the record says" in why[0], err
    assert why[1:] == ["its file's SHA-256 differs from the record's (damaged)",
                       "its file is not a regular file (a link or other kind)"]
    assert os.path.getsize(tmp_path / "n") - n_before == 120 - 15  # only the first segment was not upscaled again
    [facts] = json.loads((tmp_path / "again.json").read_text())["executor"]["segments"]
    assert (facts["segments"], facts["reused"], facts["redone"]) == (8, 1, 3)
    assert_same_frames(out, _local_whole(tmp_path, clip, env, monkeypatch), exact=True)
    assert sorted(p.name for p in out.parent.iterdir()) == ["c.mkv"]
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == [made[3].name]  # the link's target kept


def test_a_second_run_on_the_same_output_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    clip, out = _clip(tmp_path), tmp_path / "out" / "c.mkv"
    env = _net_env(tmp_path, 10**6, slow_s=0.02)
    first = _run([clip, out, *NET, "--segment-seconds", "0.5", "--quiet"], env, wait=False)
    lock = out.parent / ".c.mkv.lock"
    for _ in range(600):
        if lock.exists() and lock.read_text():
            break
        assert first.poll() is None, first.communicate()[1][-2000:]
        import time

        time.sleep(0.05)
    monkeypatch.syspath_prepend(str(tmp_path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["sr", str(clip), str(out), *NET, "--segment-seconds", "0.5"]) == 1
    err = capsys.readouterr().err
    assert f"failed clip.mp4: another run (pid {first.pid}) is writing this output; it is left to that run" in err
    assert "Traceback" not in err
    _, first_err = first.communicate(timeout=RUN_LIMIT_S)
    assert first.returncode == 0, first_err[-2000:]
    assert len(frames_of(out)) == 120
    assert sorted(p.name for p in out.parent.iterdir()) == ["c.mkv"]


def _in_mount_namespace() -> str | None:
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    p = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True,
                       text=True)
    return None if p.returncode == 0 else f"cannot mount a small tmpfs in a user namespace: {p.stderr.strip()}"


FULL_DISK = textwrap.dedent("""
    set -e
    mount -t tmpfs -o size={size} tmpfs {disk}
    head -c {filler} /dev/zero > {disk}/filler
    set +e
    {sr} {clip} {disk}/c.mkv {args} --quiet 2> {tmp}/first.err; echo $? > {tmp}/first.rc
    ls -a {disk} > {tmp}/after_first.ls
    rm {disk}/filler
    {sr} {clip} {disk}/c.mkv {args} --quiet --skip-existing --summary {tmp}/again.json 2> {tmp}/again.err
    echo $? > {tmp}/again.rc
    ls -a {disk} > {tmp}/after_again.ls
    cp {disk}/c.mkv {tmp}/joined.mkv
""")


@pytest.mark.skipif((why := _in_mount_namespace()) is not None, reason=str(why))
def test_a_full_disk_in_the_join_keeps_the_finished_segments(tmp_path, weights):
    """The output's folder on a small tmpfs (a mount namespace of its own): the segments fit, the join does not."""
    clip = make_clip(tmp_path / "clip.mkv", "libx264", 32, 24, 60, 30, codec_options={"g": "15"})
    args = ["--backend", "ort", "--threads", "1", "--scale", "2", "--segment-seconds", "0.5",
            *(["--weights", weights] if weights else [])]
    assert main(["sr", str(clip), str(tmp_path / "free.mkv"), *args, "--quiet"]) == 0
    size = (tmp_path / "free.mkv").stat().st_size
    disk = tmp_path / "disk"
    disk.mkdir()
    script = FULL_DISK.format(size=4 << 20, disk=disk, filler=(4 << 20) - size * 3 // 2, tmp=tmp_path, clip=clip,
                              sr=f"{sys.executable} -m pipeline sr", args=" ".join(map(str, args)))
    subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=REPO, check=True, timeout=RUN_LIMIT_S,
                   env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    err = (tmp_path / "first.err").read_text()
    assert (tmp_path / "first.rc").read_text().strip() == "1" and "Traceback" not in err
    first = (tmp_path / "after_first.ls").read_text().split()
    kept = sum(n.endswith(".nut") for n in first)
    assert f"No space left on device; its {kept} finished segment(s) are kept beside it: free space and rerun " \
           "with --skip-existing" in err, err
    assert kept == 3 and "c.mkv" not in first  # kept, each with its record; no half output
    assert not [n for n in first if n.endswith(".part")]
    assert (tmp_path / "again.rc").read_text().strip() == "0", (tmp_path / "again.err").read_text()
    [facts] = json.loads((tmp_path / "again.json").read_text())["executor"]["segments"]
    assert facts["reused"] == kept
    assert (tmp_path / "after_again.ls").read_text().split() == [".", "..", "c.mkv"]
    assert_same_frames(tmp_path / "joined.mkv", tmp_path / "free.mkv", exact=True)


def test_repeated_timestamps_read_the_same_whole_and_in_segments(tmp_path, weights):
    """Every 7th frame's pts equals the one before: each reader shifts it one tick, so the whole run and the
    segments (NUT refuses equal times) give the same frames; the Ray and Triton tests run the same clip."""
    clip = repeated_pts_clip(tmp_path / "rep.mkv")
    common = ["--backend", "ort", "--threads", "1", "--scale", "2", "--quiet",
              *(["--weights", weights] if weights else [])]
    assert main(["sr", str(clip), str(tmp_path / "whole.mkv"), *common]) == 0
    assert main(["sr", str(clip), str(tmp_path / "seg.mkv"), *common, "--segment-seconds", "1"]) == 0
    assert_same_frames(tmp_path / "seg.mkv", tmp_path / "whole.mkv", exact=True)
    pts = [f.pts for f in frames_of(tmp_path / "whole.mkv")]
    assert len(pts) == 90 and all(a < b for a, b in zip(pts, pts[1:], strict=False)) and pts[7] == pts[6] + 1


def _reordered(path: Path) -> int:
    """Video packets decoded before a frame shown earlier (B-frames)."""
    with av.open(str(path)) as c:
        pts = [p.pts for p in c.demux(c.streams.video[0]) if p.size]
    return sum(b < a for a, b in zip(pts, pts[1:], strict=False))


def test_h264_segments_keep_b_frames(tmp_path, weights):
    clip = h264_clip(tmp_path / "in.mp4", seconds=4)
    common = ["--backend", "ort", "--threads", "1", "--scale", "2", "--codec", "h264", "--quiet",
              *(["--weights", weights] if weights else [])]
    assert main(["sr", str(clip), str(tmp_path / "whole.mp4"), *common]) == 0
    assert main(["sr", str(clip), str(tmp_path / "seg.mp4"), *common, "--segment-seconds", "1"]) == 0
    assert _reordered(tmp_path / "seg.mp4") > 0 and _reordered(tmp_path / "whole.mp4") > 0
    assert_same_frames(tmp_path / "seg.mp4", tmp_path / "whole.mp4", exact=False)


class _InProcess:
    """A Board called in this process the way Ray calls an actor (`handle.method.remote(...)`)."""

    def __init__(self, obj):
        self.obj = obj

    def __getattr__(self, name):
        from types import SimpleNamespace

        return SimpleNamespace(remote=getattr(self.obj, name))


def test_ray_progress_moves_per_frame_and_never_back():
    """--ray's bar (pipeline.cluster.progress): the frames a segment's encoder counts in an actor show on the driver's
    bar before the segment ends; a finished segment counts once; a redone one never moves the bar back."""
    import time
    from types import SimpleNamespace

    from pipeline.cluster import progress
    from pipeline.sr.runner.console import PlainProgress

    board = _InProcess(progress.Board())
    shown = PlainProgress(100, lambda line: None, unit="frame")
    bar = progress.DriverBar(SimpleNamespace(get=lambda ref, timeout=None: ref), board, shown, done=10)
    try:
        assert shown.n == 10  # a killed run's finished segments
        seg = progress.RemoteBar(board, progress.segment_key("clip.mkv", 1))
        seg.update(7)  # the first update is pushed at once, later ones at most every PUSH_S
        deadline = time.monotonic() + 30
        while shown.n < 17 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shown.n == 17  # mid-segment
        bar.update(20, progress.segment_key("clip.mkv", 1))  # its record: 20 frames, counted once
        assert shown.n == 30
        redo = progress.RemoteBar(board, progress.segment_key("clip.mkv", 1))
        redo.update(3)  # a retried segment counting again from zero
        time.sleep(progress.POLL_S * 3)
        assert shown.n == 30
    finally:
        bar.stop()
