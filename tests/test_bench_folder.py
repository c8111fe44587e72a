"""pipeline.bench.folder: the folder run against pure inference, on real files and a real backend."""
import pytest

from pipeline import backends, quality
from pipeline.bench.folder import DEVICE_GOAL, GOAL, GOAL_MIN_IMAGES, GOAL_MIN_SIZE, folder_throughput, goal_for


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SRDEPLOY_CACHE", str(tmp_path / "cache"))


def test_folder_throughput_reports_both_sides_and_the_ratio():
    be = backends.create("torch", "srcnn-x3", "fp32", threads=1)
    lines = []
    r = folder_throughput("srcnn-x3", 3, 40, backend=be, log=lines.append, repeats=2)
    assert r["model"] == "srcnn-x3" and r["backend"] == "torch" and r["images"] == 3 and r["size"] == 40
    assert r["scale"] == 3 and r["repeats"] == 2 and len(r["runs_folder_s"]) == len(r["runs_inference_s"]) == 2
    assert r["inference_s"] > 0 and r["folder_s"] > 0
    assert r["ratio"] == pytest.approx(r["inference_s"] / r["folder_s"])
    assert r["ratio_best"] == pytest.approx(min(r["runs_inference_s"]) / min(r["runs_folder_s"]))
    assert r["folder_ms_per_image"] == pytest.approx(1e3 * r["folder_s"] / 3)
    assert r["overhead_s"] == pytest.approx(r["folder_s"] - r["inference_s"])
    assert r["goal"] is None and r["meets_goal"] is None  # 3 x 40^2 times start-up: not held to the goal
    assert len(lines) == 1 and "% of inference throughput" in lines[0] and "not held to the goal" in lines[0]


def test_the_goal_is_judged_only_where_a_run_times_throughput():
    """`bench --quick`'s 2 x 64^2 rows were printed as failing a 90 % goal they cannot measure (issue 59)."""
    assert goal_for(False, 2, 64) is None and goal_for(True, 16, 64) is None and goal_for(False, 4, 512) is None
    assert goal_for(False, GOAL_MIN_IMAGES, GOAL_MIN_SIZE) == GOAL and goal_for(True, 16, 512) == DEVICE_GOAL


def test_stage_cost_row_from_the_near_free_model():
    """The row every machine gets: the stage's CPU and wall per output MPix beyond inference, and cores busy."""
    from pipeline.bench.folder import NEAR_FREE, stage_cost

    lines = []
    r = stage_cost(2, 48, repeats=1, log=lines.append)
    assert r["model"] == NEAR_FREE and r["images"] == 2 and r["size"] == 48
    assert r["out_mpix"] == pytest.approx(2 * 144 * 144 / 1e6)  # every image exactly 48^2 -> 144^2
    assert r["folder_cpu_ms_per_mpix"] == pytest.approx(r["stage_cpu_ms_per_mpix"] + r["inference_cpu_ms_per_mpix"])
    assert r["folder_cpu_ms_per_mpix"] > 0 and r["folder_wall_ms_per_mpix"] > 0 and r["cores_busy"] > 0
    assert 1 <= r["workers"] <= r["usable_cores"]
    assert len(lines) == 1 and "per output MPix beyond inference" in lines[0]


def test_gpu_folder_row_skips_with_the_reason_without_a_gpu():
    from pipeline.bench.folder import gpu_folder_rows
    from pipeline.native.cuda_driver import gpu_visible

    if gpu_visible()[0]:
        pytest.skip("a CUDA GPU is visible: the row runs (bench on a GPU machine)")
    notes = []
    assert gpu_folder_rows(["srcnn-x3"], 2, 32, log=notes.append, note=notes.append) == []
    assert len(notes) == 1 and notes[0].startswith("GPU folder row: ") and len(notes[0]) > len("GPU folder row: ")


def test_pure_inference_times_the_folder_runs_call():
    """Like for like: the pure-inference side (and its warm-up) runs the integer-pixel path (`infer_pixels`, which
    is `submit_pixels` collected) on the same pixels as the folder run, never the float `infer` (4x the bytes, and
    none of the pinned buffers, pixel sessions or graphs the folder run uses)."""
    from pipeline.backends.torch_backend import TorchBackend

    class Counted(TorchBackend):
        calls = {"infer": 0, "submit_pixels": 0}

        def infer(self, batch, scale):
            self.calls["infer"] += 1
            return super().infer(batch, scale)

        def submit_pixels(self, pixels, scale):
            self.calls["submit_pixels"] += 1
            return super().submit_pixels(pixels, scale)

    be = Counted("srcnn-x3", threads=1).load()
    # what the model adds over bicubic is measured (float `infer`, on the held-out photos) once per file, scale and
    # machine by the first sr run, then stored: measured here first so that the counts below are the runs' own
    assert quality.baseline(be) is not None
    Counted.calls = {"infer": 0, "submit_pixels": 0}
    folder_throughput("srcnn-x3", 2, 24, backend=be, log=lambda _m: None, repeats=1)
    assert be.calls == {"infer": 0, "submit_pixels": 1 + 2 + 2}  # warm-up (one shape), folder run, inference


def test_pure_inference_is_the_faster_of_one_call_and_streams_on_openvino():
    """A backend with CPU streams is timed both ways, and the folder run is held to the faster."""
    pytest.importorskip("openvino", reason="OpenVINO is not installed")
    be = backends.create("openvino", "srcnn-x3", "fp32", threads=2)
    lines = []
    r = folder_throughput("srcnn-x3", 3, 32, backend=be, log=lines.append, repeats=1)
    one, streams = r["inference_one_call_ms_per_image"], r["inference_streams_ms_per_image"]
    assert streams is not None and r["inference_ms_per_image"] == pytest.approx(min(one, streams))
    assert "2 streams" in lines[0] and be.streams == 1


def test_host_side_rows_on_the_stand_in_device():
    """bench's host-side rows (issue 58): CPU per output MPix of the driving thread and of the process, and the
    video's frames/s against the encoder alone on the same frames, each on the stand-in device."""
    from pipeline.bench.host_side import GOALS, folder_row, video_row

    lines = []
    f = folder_row(2, 32, repeats=1, log=lines.append)
    assert f["backend"] == "stand-in" and f["out_mpix"] == pytest.approx(2 * 96 * 96 / 1e6, abs=1e-3)
    assert 0 < f["serial_cpu_ms_per_mpix"] <= f["host_cpu_ms_per_mpix"] and f["goals"] == GOALS["folder"]
    v = video_row(4, repeats=1, log=lines.append)
    assert v["backend"] == "stand-in" and v["frames"] == 4 and v["output"] == [1920, 1080]
    assert v["of_encoder"] == pytest.approx(v["fps"] / v["encoder_fps"], rel=0.01) and v["encoder_fps"] > 0
    assert len(lines) == 2 and "of the encoder alone" in lines[1]
