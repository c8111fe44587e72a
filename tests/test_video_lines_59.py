"""The video lines a user reads (issue 59 item 5): a frame whose output is not finite fails the clip with a line
naming that frame (its number and time), and the clip's line says which streams are copied as they are."""
from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest

from pipeline.cli import main
from tests.caches import one_thread_own_cache
from tests.video_clips import make_clip

NAN_MODEL = "byom_nets:nan_near_white_factory"  # x2 nearest, NaN wherever the input is near white


_env = one_thread_own_cache()


def _white_at(path, white: int, frames: int = 6):
    """FFV1 RGB frames at 10 fps, all gray except frame `white` (from 1), which has a white 4x4 patch."""
    with av.open(str(path), "w") as out:
        v = out.add_stream("ffv1", rate=10)
        v.width, v.height, v.pix_fmt = 16, 12, "bgr0"
        for i in range(frames):
            rgb = np.full((12, 16, 3), 100, np.uint8)
            if i + 1 == white:
                rgb[2:6, 3:7] = 255
            f = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="bgr0")
            f.pts = i
            for p in v.encode(f):
                out.mux(p)
        for p in v.encode():
            out.mux(p)
    return path


@pytest.mark.parametrize("batch", ["1", "3"])
def test_a_non_finite_frame_is_named_by_number_and_time(tmp_path, capsys, batch):
    src = _white_at(tmp_path / "in.mkv", white=5)
    code = main(["sr", str(src), str(tmp_path / "out.mkv"), "--model", NAN_MODEL, "--backend", "torch",
                 "--threads", "1", "--batch", batch])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    line = next(ln for ln in err.splitlines() if ln.startswith("failed in.mkv"))
    assert "frame 5 at 0.400 s: " in line and "output is not finite (NaN or inf): 64 pixel(s)" in line  # 4x4 x2
    assert "whole image" not in line and line.endswith("the clip is not written")
    assert not (tmp_path / "out.mkv").exists()


def test_the_clip_line_says_the_audio_is_copied(tmp_path, capsys):
    src = make_clip(tmp_path / "in.mp4", "libx264", 32, 24, 5, Fraction(10), audio="aac")
    assert main(["sr", str(src), str(tmp_path / "out.mp4"), "--model", "byom_nets:nearest3_factory", "--backend",
                 "torch", "--threads", "1"]) == 0
    line = next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("in.mp4: 32x24"))
    assert line.endswith("audio aac copied)")
    assert main(["sr", str(src), str(tmp_path / "out2.mp4"), "--model", "byom_nets:nearest3_factory", "--backend",
                 "torch", "--threads", "1", "--audio", "drop"]) == 0
    assert "copied)" not in next(ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("in.mp4: 32x24"))
