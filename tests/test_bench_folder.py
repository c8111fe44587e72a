"""pipeline.bench.folder: the folder run against pure inference, on real files and a real backend."""
import pytest

from pipeline import backends
from pipeline.bench.folder import GOAL, folder_throughput


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
    assert r["goal"] == GOAL and r["meets_goal"] == (r["ratio"] >= GOAL)
    assert len(lines) == 1 and "% of inference throughput" in lines[0]
