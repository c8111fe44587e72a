"""The stand-in device (bench's host-side rows): never offered to users, a realistic output made once per input and
handed out without a copy, and the sr stage's folder and video runs on it write exactly its output."""
from __future__ import annotations

import dataclasses
import inspect

import cv2
import numpy as np
import pytest

from pipeline import backends
from pipeline.backends import registry
from pipeline.errors import PipelineError
from pipeline.sr import read_image, upscale


def _nearest(x: np.ndarray, f: int = 3) -> np.ndarray:
    return np.repeat(np.repeat(x, f, axis=0), f, axis=1)


def test_the_stand_in_is_declared_but_never_offered_or_chosen():
    flagged = [d.name for _, d in registry.TABLE if d.stand_in]
    assert flagged == [backends.stand_in("srcnn").name]
    assert not set(flagged) & set(backends.NAMES)
    assert not any(d.stand_in for d in backends.descriptors())
    with pytest.raises(PipelineError, match="unknown backend .stand-in."):
        backends.create_named(flagged[0], "srcnn")
    # its constructor takes exactly its declared options, as every offered backend's does
    desc = registry.STAND_IN.DESCRIPTOR
    params = inspect.signature(registry.STAND_IN.__init__).parameters
    assert {f.name: f.default for f in dataclasses.fields(desc.options)} == \
        {k: p.default for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def test_its_output_is_the_nearest_neighbour_made_once_and_not_copied_per_call():
    be = backends.stand_in("srcnn")
    x = np.random.default_rng(1).integers(0, 256, (1, 40, 56, 3), dtype=np.uint8)
    y = be.infer_pixels(x, 3.0)
    assert np.array_equal(y[0], _nearest(x[0])) and not y.flags.writeable
    assert be.infer_pixels(x.copy(), 3.0) is y  # the same input: the same array
    other = x.copy()
    other[0, 20, 28] ^= 1
    assert not np.array_equal(be.submit_pixels(other, 3.0).result(), y)
    assert not be.host_cores and not be.on_gpu and be.device_memory() is not None
    with pytest.raises(PipelineError, match="integer factors"):
        be.infer_pixels(x, 2.5)


def test_a_folder_run_on_it_writes_its_output_and_an_alpha_plane(tmp_path):
    rng = np.random.default_rng(2)
    src = tmp_path / "in"
    src.mkdir()
    rgb = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    bgra = rng.integers(0, 256, (24, 32, 4), dtype=np.uint8)
    cv2.imwrite(str(src / "a.png"), rgb)
    cv2.imwrite(str(src / "b.png"), bgra)
    s = upscale(src, tmp_path / "out", model="srcnn", backend=backends.stand_in("srcnn"), progress=False,
                log=lambda _m: None)
    assert s.counts["ok"] == 2 and s.executor["serial_cpu_s"] > 0
    assert np.array_equal(read_image(tmp_path / "out" / "a.png").pixels, _nearest(rgb))
    b = read_image(tmp_path / "out" / "b.png").pixels
    assert b.shape == (72, 96, 4) and np.array_equal(b[..., :3], _nearest(bgra[..., :3]))
    assert abs(int(b[..., 3].mean()) - int(bgra[..., 3].mean())) < 8  # the alpha plane is there, bicubic


def test_a_clip_on_it_runs_whole_frames_and_keeps_every_frame(tmp_path):
    pytest.importorskip("av")
    from pipeline.bench.video import write_clip
    from pipeline.sr import encoder_alone

    clip = write_clip(tmp_path / "in.mp4", 64, 48, 6)
    be = backends.stand_in("srcnn")
    s = upscale(clip, tmp_path / "out.mp4", model="srcnn", backend=be, progress=False, log=lambda _m: None)
    rec = s.records[0]
    assert rec.status == "ok" and rec.tiles == 1 and rec.video["frames"] == 6 and rec.out_size == (192, 144)
    seconds, frames = encoder_alone(clip, tmp_path / "alone.mp4", 3.0, 1, lambda p: be.infer_pixels(p[None], 3)[0])
    assert frames == 6 and seconds > 0 and (tmp_path / "alone.mp4").stat().st_size > 0
