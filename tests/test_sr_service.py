"""The `sr` Triton model without a server: pipeline.serve.sr_service answers requests with the local run's pixels,
one bad request never fails the others, and the config `triton` writes for it parses as Triton's ModelConfig.
The served end-to-end runs are in test_triton_serve.py."""
import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from skimage import data

from pipeline.cli import main
from pipeline.errors import PipelineError
from pipeline.export.cached import onnx_for
from pipeline.images import imageio
from pipeline.serve.sr_service import SrService
from pipeline.serve.tensors import OUTPUTS, array_from_output, output_from_array
from pipeline.sr import upscale

model_config_pb2 = pytest.importorskip("tritonclient.grpc.model_config_pb2",
                                       reason="tritonclient is not installed (pip install -e '.[cluster]')")
text_format = pytest.importorskip("google.protobuf.text_format")


@pytest.fixture(scope="module")
def onnx_file() -> Path:
    return onnx_for("srcnn")


@pytest.fixture(scope="module")
def service(onnx_file) -> SrService:
    return SrService(onnx_file, "ort", max_batch=4)


def _png(pixels: np.ndarray) -> bytes:
    return imageio.encode(pixels, "png")


def _bgr(h: int, w: int, seed: int = 0) -> np.ndarray:
    img = data.astronaut()[::4, ::4, ::-1]
    return np.ascontiguousarray(np.roll(img, seed * 7, axis=0)[:h, :w])


def _local(tmp_path: Path, onnx_file: Path, name: str, pixels: np.ndarray, scale: float = 3.0,
           tile: int | None = None) -> np.ndarray:
    src, out = tmp_path / "in" / name, tmp_path / "out"
    src.parent.mkdir(exist_ok=True)
    src.write_bytes(_png(pixels))
    s = upscale(src, out, backend="ort", onnx=onnx_file, scale=scale, tile=tile, progress=False, log=lambda m: None)
    assert not s.failed
    return cv2.imread(str(out / name), cv2.IMREAD_UNCHANGED)


@pytest.mark.parametrize("kind", ["rgb8", "rgba8", "rgb16", "gray8"])
def test_answer_equals_local_run(tmp_path, onnx_file, service, kind):
    base = _bgr(40, 52)
    pixels = {"rgb8": base, "rgba8": cv2.cvtColor(base, cv2.COLOR_BGR2BGRA),
              "rgb16": base.astype(np.uint16) * 257, "gray8": cv2.cvtColor(base, cv2.COLOR_BGR2GRAY)}[kind]
    want = _local(tmp_path, onnx_file, "a.png", pixels, scale=2.5)
    [answer] = service.run([{"image_bytes": np.array([[_png(pixels)]], dtype=object), "scale": np.array([[2.5]])}])
    key = "output_u16" if kind == "rgb16" else "output_u8"
    assert set(answer) == {key, "info"}
    got = output_from_array(answer[key][0])
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_tiled_answer_equals_local_tiled_run(tmp_path, onnx_file):
    """A tiled image on a batching server (max_batch 4) is tiled and run as the local run tiles it (one tile at a
    time, the same plan): the same bytes."""
    tiled = SrService(onnx_file, "ort", max_batch=4, tile=16)
    pixels = _bgr(44, 60)
    want = _local(tmp_path, onnx_file, "t.png", pixels, scale=3.0, tile=16)
    [answer] = tiled.run([{"image_bytes": np.array([[_png(pixels)]], dtype=object)}])
    assert json.loads(answer["info"][0, 0])["tiles"] > 4
    assert np.array_equal(output_from_array(answer["output_u8"][0]), want)


def test_bad_request_fails_alone(service):
    good = {"image_bytes": np.array([[_png(_bgr(30, 30))]], dtype=object)}
    corrupt = {"image_bytes": np.array([[b"\x89PNG\r\n\x1a\n not an image IEND"]], dtype=object)}
    out_of_range = {**good, "scale": np.array([[9.0]])}
    two_inputs = {**good, "pixels_u8": np.zeros((1, 4, 4, 3), np.uint8)}
    bad_format = {**good, "format": np.array([[b"gif"]], dtype=object)}
    res = service.run([good, corrupt, out_of_range, two_inputs, bad_format, good])
    assert isinstance(res[0], dict) and isinstance(res[-1], dict)
    assert np.array_equal(res[0]["output_u8"], res[-1]["output_u8"])
    with pytest.raises(imageio.ImageError) as e:
        imageio.decode(bytes(corrupt["image_bytes"][0, 0]))
    assert res[1] == str(e.value)
    assert "scale" in res[2] and "9" in res[2]
    assert "exactly one of" in res[3]
    assert "unknown output format" in res[4]


def test_any_exception_reading_a_request_fails_it_alone_without_server_paths(service, monkeypatch):
    """Not-UTF-8 `format`, a `quality` that is no number, a failure the adapter met reading the tensors (its text
    names a server path), and a pixel array over SRDEPLOY_MAX_PIXELS: each fails alone, the good ones are answered."""
    good = {"image_bytes": np.array([[_png(_bgr(30, 30))]], dtype=object)}
    not_utf8 = {**good, "format": np.array([[b"\xff\xfe"]], dtype=object)}
    bad_quality = {**good, "format": np.array([[b"jpg"]], dtype=object), "quality": np.array([[b"high"]], dtype=object)}
    adapter = OSError(2, "No such file or directory", "/opt/server/secret/model.py")
    big = {"pixels_u8": np.zeros((1, 40, 40, 3), np.uint8)}
    monkeypatch.setenv("SRDEPLOY_MAX_PIXELS", "1000")
    res = service.run([good, not_utf8, bad_quality, adapter, big, good])
    assert isinstance(res[0], dict) and isinstance(res[-1], dict)
    assert res[1] == "format is not UTF-8 text"
    assert res[2] == "the request could not be read (ValueError; see the server's log)"
    assert res[3] == "the request could not be read (FileNotFoundError; see the server's log)"
    assert res[4].startswith("pixels array is 40x40 (0.0016 megapixels), over the limit of 1,000 pixels")
    assert not any("/" in r for r in res[1:5])


def test_array_inputs_are_rgb_and_batched(service):
    """pixels_u8 is RGB (HxWxC); a request of two equal-size images answers both, in order, as single requests do."""
    a, b = _bgr(24, 36, 0), _bgr(24, 36, 1)
    rgb = np.stack([a[:, :, ::-1], b[:, :, ::-1]])
    [batched] = service.run([{"pixels_u8": rgb}])
    singles = service.run([{"image_bytes": np.array([[_png(x)]], dtype=object)} for x in (a, b)])
    assert batched["output_u8"].shape == (2, 72, 108, 3)
    for i in range(2):
        assert np.array_equal(batched["output_u8"][i], singles[i]["output_u8"][0])
    assert np.array_equal(array_from_output(output_from_array(batched["output_u8"][0])), batched["output_u8"][0])


def test_encoded_answer(service):
    img = _bgr(20, 28)
    [arr, enc] = service.run([{"image_bytes": np.array([[_png(img)]], dtype=object)},
                              {"image_bytes": np.array([[_png(img)]], dtype=object),
                               "format": np.array([[b"png"]], dtype=object)}])
    assert set(enc) == {"output_bytes", "info"}
    decoded = imageio.decode(bytes(enc["output_bytes"][0, 0])).pixels
    assert np.array_equal(decoded, output_from_array(arr["output_u8"][0]))


def test_sr_model_config(tmp_path, capsys):
    repo = tmp_path / "repo"
    assert main(["triton", "--model", "srcnn", "--backend", "ort", "--output", str(repo), "--instances", "2",
                 "--python-env", "/opt/env.tar.gz"]) == 0
    assert "python -m pipeline serve" in capsys.readouterr().out
    cfg = model_config_pb2.ModelConfig()
    text_format.Parse((repo / "sr" / "config.pbtxt").read_text(), cfg)
    assert cfg.backend == "python" and cfg.max_batch_size > 1 and cfg.HasField("dynamic_batching")
    assert cfg.instance_group[0].count == 2
    assert all(t.optional for t in cfg.input) and "image_bytes" in [t.name for t in cfg.input]
    assert [t.name for t in cfg.output] == list(OUTPUTS)
    params = {k: v.string_value for k, v in cfg.parameters.items()}
    assert params["EXECUTION_ENV_PATH"] == "/opt/env.tar.gz" and params["backend"] == "ort"
    assert (repo / "sr" / params["model_file"]).resolve() == (repo / "srcnn" / "1" / "model.onnx").resolve()
    assert (repo / "sr" / "1" / "model.py").is_file()


@pytest.mark.parametrize("args, msg", [
    (["sr", "IN", "OUT", "--triton", "ftp://x:1"], "--triton takes http://HOST:PORT"),
    (["sr", "IN", "OUT", "--triton", "http://127.0.0.1"], "--triton takes http://HOST:PORT"),
    (["sr", "IN", "OUT", "--concurrency", "2"], "--concurrency applies only to --triton runs"),
    (["sr", "IN", "OUT", "--triton", "http://127.0.0.1:9", "--tile", "64"], "--tile applies only to local runs"),
    (["sr", "IN", "OUT", "--triton", "http://127.0.0.1:9", "--concurrency", "0"], "--concurrency must be"),
    (["serve", "NOREPO"], "model repository not found"),
    (["triton", "--model", "srcnn", "--backend", "ort", "--output", "R", "--name", "sr"], "both be named"),
    (["triton", "--model", "srcnn", "--backend", "ort", "--output", "R", "--sr-name", "../x"], "--sr-name '../x'"),
])
def test_bad_arguments_are_one_line(tmp_path, monkeypatch, capsys, args, msg):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "IN").mkdir()
    cv2.imwrite(str(tmp_path / "IN" / "a.png"), _bgr(8, 8))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not (tmp_path / "OUT").exists() and not (tmp_path / "R").exists()


def test_unreachable_server_is_one_line(tmp_path, capsys):
    """Nothing listens on 127.0.0.1:9 (discard): one line, exit 2, nothing written."""
    (tmp_path / "in").mkdir()
    cv2.imwrite(str(tmp_path / "in" / "a.png"), _bgr(8, 8))
    for url in ("http://127.0.0.1:9", "grpc://127.0.0.1:9"):
        assert main(["sr", str(tmp_path / "in"), str(tmp_path / "out"), "--triton", url]) == 2
        err = capsys.readouterr().err
        assert "cannot reach the Triton server" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_serve_needs_a_server(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    (repo / "m" / "config.pbtxt").write_text('backend: "python"\n')
    monkeypatch.setenv("SRDEPLOY_TRITON_HOME", str(tmp_path / "nothing"))
    assert main(["serve", str(repo)]) == 2
    assert "make triton-env" in capsys.readouterr().err  # a checkout; a pip install: tests/test_installed.py
    assert main(["serve", str(repo), "--tritonserver", str(tmp_path / "no-binary")]) == 2
    assert "tritonserver not found" in capsys.readouterr().err


def test_triton_run_checks_video_options_up_front(tmp_path, capsys):
    """Clips are decoded and encoded by the client: a --codec their container cannot hold is refused by name before
    any request (no server at that address: it is never asked)."""
    (tmp_path / "in").mkdir()
    cv2.imwrite(str(tmp_path / "in" / "a.png"), _bgr(8, 8))
    (tmp_path / "in" / "clip.mp4").write_bytes(b"not decoded: refused by name before any request")
    assert main(["sr", str(tmp_path / "in"), str(tmp_path / "out"), "--triton", "grpc://127.0.0.1:9", "--codec",
                 "ffv1"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --codec ffv1 cannot be written into .mp4 (it takes: h264, h265, vp9, av1)\n"
    assert not (tmp_path / "out").exists()


def test_served_bench_summary_and_table():
    """pipeline.bench.triton_bench's medians and ratios, and the report's table of them."""
    from pipeline.bench.triton_bench import summarize
    from pipeline.report import triton_markdown

    run = {"images": 10, "backend": "ort (CPU)"}
    runs = {"local": [{**run, "wall_s": 6.0, "process_s": 5.0}, {**run, "wall_s": 5.0, "process_s": 4.0},
                      {**run, "wall_s": 7.0, "process_s": 6.0}],
            "triton-1": [{**run, "wall_s": 4.0, "process_s": 2.5}] * 3,
            "triton-2": [{**run, "wall_s": 9.0, "process_s": 10.0}] * 3}
    res = summarize(runs, (1, 2))
    assert res["local"]["process_s"] == 5.0 and res["local"]["images_per_s"] == 2.0
    assert res["triton"][1]["images_per_s"] == 4.0 and res["triton"][1]["vs_local"] == 2.0
    assert res["triton"][2]["vs_local"] == 0.5
    table = "\n".join(triton_markdown(res))
    assert "| Triton, 1 client(s) | 4.0 | 2.50 | 4.0 | 2.00x |" in table and "| local folder run |" in table


def test_serve_host_names_are_resolved_for_tritonserver(tmp_path):
    """tritonserver binds 255.255.255.255 for `localhost` (and fails minutes later): the name becomes its address."""
    from pipeline.serve.server import plan_server

    (tmp_path / "repo" / "m").mkdir(parents=True)
    (tmp_path / "repo" / "m" / "config.pbtxt").write_text('name: "m"\nbackend: "python"\n')
    cmd = plan_server(tmp_path / "repo", binary=Path("/bin/true"), host="localhost").command
    assert cmd[cmd.index("--http-address") + 1] == cmd[cmd.index("--grpc-address") + 1] == "127.0.0.1"
    with pytest.raises(PipelineError, match=r"^--host 'no-such-host.invalid' is not an address and does not resolve"):
        plan_server(tmp_path / "repo", binary=Path("/bin/true"), host="no-such-host.invalid")


def test_memory_a_large_request_took_goes_back(service):
    """The served model idles between requests: what a 0.5 MP x3 request grew the process by is given back (ONNX
    Runtime's arena shrinks after each run, the heap is trimmed); it held over 1 GB before."""
    import psutil

    proc = psutil.Process()
    service.run([{"pixels_u8": np.zeros((1, 16, 16, 3), np.uint8)}])
    before = proc.memory_info().rss
    img = np.random.default_rng(0).integers(0, 255, (1, 700, 700, 3), np.uint8)
    (answer,) = service.run([{"pixels_u8": img}])
    assert answer["output_u8"].shape == (1, 2100, 2100, 3)
    del answer
    grew = proc.memory_info().rss - before
    assert grew < 300 << 20, f"{grew >> 20} MiB still held"
