"""`python -m pipeline doctor`: on this machine (no GPU) it runs the host-side checks, writes both reports and exits 3;
its parts turn every problem into a line with a fix, never a traceback."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.doctor import facts, report
from pipeline.doctor.results import EXIT_FAILED, EXIT_NO_GPU, EXIT_OK, FAIL, INFO, PASS, SKIP, Check, exit_code
from pipeline.native.cuda_driver import driver

REPO = Path(__file__).resolve().parents[1]


def _gpu_here() -> bool:
    return driver().count > 0


def _tensorrt_importable() -> bool:
    try:
        import tensorrt  # noqa: F401
    except Exception:  # missing, or its libraries are: the engine checks then fail naming TensorRT
        return False
    return True


@pytest.fixture(scope="module")
def doctor_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path_factory.mktemp("doctor")
    proc = subprocess.run([sys.executable, "-m", "pipeline", "doctor", "--output", str(out), "--no-engines"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    return proc, out


def test_doctor_without_gpu_exits_3_and_writes_reports(doctor_run):
    if _gpu_here():
        pytest.skip("this machine has a GPU: the no-GPU exit code does not apply")
    proc, out = doctor_run
    text = proc.stdout + proc.stderr
    assert proc.returncode == EXIT_NO_GPU, text
    assert "Traceback" not in text
    data = json.loads((out / "doctor.json").read_text())
    assert data["exit_code"] == EXIT_NO_GPU and data["failures"] == []
    names = {c["name"]: c for c in data["checks"]}
    assert names["GPU and driver"]["status"] == SKIP and names["GPU and driver"]["fix"]
    for name in ("PyTorch CUDA", "ONNX Runtime", "TensorRT", "cudart and cuBLAS", "plugin library",
                 "CUDA kernels vs torch"):
        assert name in names, sorted(names)
    md = (out / "doctor.md").read_text()
    assert "exit 3" in md and "| GPU and driver | SKIP |" in md


def test_doctor_runs_the_plugin_checks_the_machine_allows(doctor_run):
    proc, out = doctor_run
    data = json.loads((out / "doctor.json").read_text())
    names = {c["name"]: c for c in data["checks"]}
    if names["plugin library"]["status"] != PASS:
        pytest.skip("plugin library not built here")
    assert names["plugin library loads"]["status"] == PASS
    assert names["plugin creators"]["status"] == PASS
    assert names["plugin self-test"]["status"] == PASS, names["plugin self-test"]
    harness = names.get("plugin GPU harness") or names["plugin GPU harness (host-side steps)"]
    assert harness["status"] == PASS and "0 failed" in harness["detail"], harness
    assert names["plugin library"]["data"]["tensorrt_headers"]


def test_every_line_of_the_console_output_is_one_check(doctor_run):
    proc, _ = doctor_run
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("doctor: ") and "(exit " in lines[-1]
    assert all(line.split()[0] in ("PASS", "FAIL", "SKIP", "INFO") for line in lines[:-1]), lines


def test_exit_codes():
    ok, bad, skip = Check("a", PASS), Check("b", FAIL, "x", "y"), Check("c", SKIP, "no gpu")
    assert exit_code([ok, skip], gpu_present=True) == EXIT_OK
    assert exit_code([ok, skip], gpu_present=False) == EXIT_NO_GPU
    assert exit_code([ok, bad], gpu_present=False) == EXIT_FAILED
    assert exit_code([ok, bad], gpu_present=True) == EXIT_FAILED


def test_failure_lines_carry_their_fix():
    bad = Check("plugin library", FAIL, "not found", "make plugins")
    assert bad.line() == "FAIL plugin library: not found -> fix: make plugins"
    assert "fix" not in Check("x", INFO, "fact", "ignored").line()
    md = report.to_markdown([Check("ok", PASS, "fine"), bad], EXIT_FAILED)
    assert "## Failures" in md and "- plugin library: not found — fix: make plugins" in md
    data = report.to_json([bad], EXIT_FAILED)
    assert data["failures"] == [bad.line()] and data["exit_code"] == 1


def test_missing_plugin_library_fails_where_gpu_and_tensorrt_are(monkeypatch, tmp_path):
    """Section 'a loud first run': with TensorRT and a CUDA torch, a missing library is a failure with the fix."""
    monkeypatch.setenv("SR_TRT_PLUGIN_LIB", str(tmp_path / "missing.so"))
    [where_ready] = facts.plugin_library("11.4.0", torch_cuda_ok=True)
    [elsewhere] = facts.plugin_library(None, torch_cuda_ok=False)
    assert where_ready.status == FAIL and "make plugins" in where_ready.fix and "trt-headers" in where_ready.fix
    assert elsewhere.status == SKIP


def test_header_version_against_installed_tensorrt():
    assert facts._header_match("11.1.0", "11.4.0").status == PASS
    mismatch = facts._header_match("11.1.0", "10.13.3.9")
    assert mismatch.status == FAIL and "trt-headers" in mismatch.fix
    assert facts._header_match("11.1.0", None).status == SKIP


def test_a_crashing_probe_becomes_a_failed_check():
    from pipeline.doctor import _guarded

    checks: list[Check] = []

    def broken():
        raise ZeroDivisionError("boom")

    assert _guarded(checks, "probe", broken, "default") == "default"
    assert checks[0].status == FAIL and "ZeroDivisionError: boom" in checks[0].detail


def test_doctor_needs_no_venv_or_install(tmp_path):
    """`make gpu-check PY=python3` runs the doctor as `PYTHONPATH=. python -m pipeline doctor` (what make runs is
    checked by behaviour in tests/test_gpu_check.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "doctor", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--no-engines" in proc.stdout, proc.stderr


def test_doctor_runs_on_a_bare_system_python(tmp_path):
    """No venv, no PyTorch, nothing installed: still one line per check and a report, never a traceback."""
    import shutil

    python3 = shutil.which("python3", path="/usr/bin:/bin")
    if python3 is None or Path(python3).resolve() == Path(sys.executable).resolve():
        pytest.skip("no separate system python3")
    if _gpu_here():
        pytest.skip("this machine has a GPU: the no-GPU exit code does not apply")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([python3, "-m", "pipeline", "doctor", "--output", str(tmp_path), "--no-engines"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)
    text = proc.stdout + proc.stderr
    assert "Traceback" not in text and proc.returncode in (EXIT_NO_GPU, EXIT_FAILED), text
    assert json.loads((tmp_path / "doctor.json").read_text())["exit_code"] == proc.returncode


def test_engine_checks_call_compare_as_it_is():
    # Told TensorRT is ready where it is not, the engine checks still run compare_model with its real
    # signature and report each model as one FAIL line (they once passed a removed keyword: a TypeError).
    from pipeline.doctor import runs

    if _tensorrt_importable():
        pytest.skip("TensorRT is importable here: the engine checks can pass, so they need not name it")
    checks = runs.engines(None, ["srcnn-x3"], log=lambda _m: None)
    assert checks and all(c.status == "fail" for c in checks)
    # why: TensorRT's problem, or on a machine without a CUDA GPU just that (said once by `backends`, issue 42)
    assert all("TensorRT" in c.detail or c.detail == "needs a CUDA GPU" for c in checks)


def test_a_missing_plugin_library_gives_its_fix_once(monkeypatch, tmp_path):
    """The detail said `run make plugins ...` and the fix column said it again (issue 51)."""
    monkeypatch.setenv("SR_TRT_PLUGIN_LIB", str(tmp_path / "missing.so"))
    [check] = facts.plugin_library("11.4.0", torch_cuda_ok=True)
    assert "make plugins" in check.fix and "make plugins" not in check.detail, check
    assert check.detail == f"SR_TRT_PLUGIN_LIB={tmp_path / 'missing.so'} does not exist (sr TensorRT plugin library)"


def test_doctor_proves_the_cpu_backends(doctor_run):
    """Issue 67: on a CPU machine the doctor checked nothing of the CPU backends. Now one tiny real inference on
    each (ONNX Runtime's CPU sessions, our kernels as its ops, OpenVINO), and our CPU kernels against known answers."""
    from pipeline.doctor.cpu_probe import cpu_backends

    _, out = doctor_run
    names = {c["name"]: c for c in json.loads((out / "doctor.json").read_text())["checks"]}
    ran = {n: c for n, c in names.items() if n.startswith("CPU backend ")}
    assert sorted(n.split()[2] for n in ran) == sorted(cpu_backends()), sorted(names)
    assert all(c["status"] in (PASS, SKIP) for c in ran.values()), ran
    assert names["CPU backend ort-cpu (srcnn x3)"]["status"] == PASS  # the deploy runtime: always here
    for op in ("DynamicResize", "DeformConv2d"):
        kernel = names[f"CPU kernel {op} (libsr_kernels_cpu.so)"]
        assert kernel["status"] == PASS and kernel["detail"].startswith("max abs "), kernel


def test_a_cpu_probe_that_cannot_start_or_dies_is_one_line(monkeypatch):
    from pipeline.doctor import runs

    monkeypatch.setattr(runs, "_run", lambda argv, timeout: (1, "Traceback (most recent call last):\n"
                                                                "ModuleNotFoundError: No module named 'numpy'\n"))
    [check] = runs.cpu_side("srcnn")
    assert check.status == SKIP and "No module named 'numpy'" in check.detail and check.fix
    good = json.dumps(Check("CPU backend ort-cpu (srcnn x3)", PASS, "fine").to_dict())
    monkeypatch.setattr(runs, "_run", lambda argv, timeout: (-11, f"{good}\n"))
    first, died = runs.cpu_side("srcnn")
    assert first.status == PASS and died.status == FAIL and "exit -11" in died.detail and died.fix
