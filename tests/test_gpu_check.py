"""`make gpu-check PY=python3` as a GPU machine runs it, checked here by behaviour: what make runs (stand-in cmake,
python and compute-sanitizer on PATH record their calls), how the sanitizer reports are judged
(scripts/sanitize_harness.py on reports in compute-sanitizer's format), and that the `gpu` tests collect on a Python
without the optional packages."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import sanitize_harness as sanitize  # noqa: E402

PROBE = "# planted out-of-memory probe: cudaMalloc of 2^62 bytes"
OOM = """========= Program hit cudaErrorMemoryAllocation (error 2) due to "out of memory" on CUDA API call to cudaMalloc.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x4b2f3f] in libcuda.so.1
=========         Host Frame: runOnGpu(...) [0x1234] in /src/plugins_trt/tests/trtPluginGpuHarness.cpp
=========
========= Program hit CUDA_ERROR_OUT_OF_MEMORY (error 2) due to "out of memory" on CUDA API call to cuMemAlloc_v2.
=========     Saved host backtrace up to driver entry point at error
========="""  # noqa: E501 - the sanitizer's own lines
OUR_READ = """========= Invalid __global__ read of size 4 bytes
=========     at void sr::(anonymous namespace)::dynamicResizeKernel<float>(const T1 *, T1 *, long, int, int, int, int)+0x2d0 in dynamicResizeKernel.cu:27
=========     by thread (5,0,0) in block (0,0,0)
=========     Address 0x7f0000000400 is out of bounds
========="""  # noqa: E501 - the sanitizer's own line
LEAK = """========= Leaked 4096 bytes at 0x7f4e3a000000
=========     Saved host backtrace up to driver entry point at cudaMalloc time
=========         Host Frame: [0x2c1a] in trt_plugin_gpu_harness
=========
========= LEAK SUMMARY: 4096 bytes leaked in 1 allocations"""
CUBLAS_RACE = """========= Error: Race reported between Write access at void gemmSN_NN_kernel<float, 256, 4, 2, 8, 4, 4, false, cublasGemvTensorStridedBatched<const float>>(cublasGemmSmallNParams<float>)+0x1f30
=========     and Read access at void gemmSN_NN_kernel<float>+0x2010 [512 hazards]
========="""  # noqa: E501
OUR_RACE = """========= Error: Race reported between Write access at void sr::(anonymous namespace)::deformIm2colKernel<float>(sr::DeformConvShape)+0x90
=========     and Read access at void sr::(anonymous namespace)::deformIm2colKernel<float>(sr::DeformConvShape)+0xa0 [4 hazards]
========="""  # noqa: E501


def _memcheck(*parts: str, errors: int) -> str:
    return "\n".join(["========= COMPUTE-SANITIZER", *parts, f"========= ERROR SUMMARY: {errors} errors"])


def _racecheck(*parts: str, errors: int) -> str:
    return "\n".join(["========= COMPUTE-SANITIZER", *parts,
                      f"========= RACECHECK SUMMARY: {errors} hazards displayed ({errors} errors, 0 warnings)"])


def test_planted_out_of_memory_probes_are_expected():
    report = _memcheck(PROBE, OOM, "# 510 checks, 0 failed", errors=2)
    v = sanitize.judge("memcheck", report, report, 0)
    assert v.ok and len(v.expected) == 2 and not v.ours
    # the same records without the harness saying it planted them: not expected, they fail
    v = sanitize.judge("memcheck", _memcheck(OOM, errors=2), "", 0)
    assert not v.ok and len(v.ours) == 2
    # one probe allows its two records, not a third
    report = _memcheck(PROBE, OOM, OOM, errors=4)
    assert len(sanitize.judge("memcheck", report, report, 0).ours) == 2


def test_records_inside_the_harness_lines_and_the_print_limit():
    """As seen on an H100: a record can start in the middle of a harness line the sanitizer interrupted, and a
    print limit adds an 'N errors were not printed' summary that is not more errors (every tool runs unlimited)."""
    glued = "ok   DynamicResize FP32 [1,3,256" + OOM
    report = _memcheck(PROBE, glued, errors=2)
    v = sanitize.judge("memcheck", report, report, 0)
    assert v.ok and len(v.expected) == 2
    limited = report + "\n========= ERROR SUMMARY: 1 error was not printed. Use --print-limit option"
    assert sanitize.judge("memcheck", limited, limited, 0).ok
    report = _memcheck(PROBE, OOM, errors=3) + "\n========= ERROR SUMMARY: 1 errors were not printed."
    assert not sanitize.judge("memcheck", report, report, 0).ok  # 3 counted, 2 read: one error unseen
    assert all("--print-limit" in flags for flags in sanitize.TOOLS.values())


def test_errors_and_leaks_in_our_code_fail():
    for part, errors in ((OUR_READ, 1), (LEAK, 1)):
        report = _memcheck(PROBE, OOM, part, errors=2 + errors)
        v = sanitize.judge("memcheck", report, report, 0)
        assert not v.ok and len(v.ours) == 1 and len(v.expected) == 2
    assert "dynamicResizeKernel" in sanitize.judge("memcheck", _memcheck(OUR_READ, errors=1), "", 0).ours[0]


def test_cublas_hazards_are_reported_apart_and_ours_fail():
    v = sanitize.judge("racecheck", _racecheck(CUBLAS_RACE, errors=1), "", 0)
    assert v.ok and len(v.cublas) == 1
    v = sanitize.judge("racecheck", _racecheck(CUBLAS_RACE, OUR_RACE, errors=2), "", 0)
    assert not v.ok and len(v.cublas) == 1 and "deformIm2colKernel" in v.ours[0]
    # memcheck errors inside cuBLAS come from the arguments we gave it: they count as ours
    assert not sanitize.judge("memcheck", _memcheck(CUBLAS_RACE.replace("Error: Race reported between Write access",
                                                                        "Invalid __global__ write"), errors=1),
                              "", 0).ok


def test_counts_that_do_not_add_up_and_a_failing_harness_fail():
    v = sanitize.judge("memcheck", _memcheck(errors=3), "", 0)
    assert not v.ok and "counts 3 error(s), only 0" in v.problems[0]
    assert not sanitize.judge("racecheck", _racecheck(errors=0), "", 1).ok
    assert sanitize.judge("racecheck", _racecheck(errors=0), "", 0).ok


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fake_machine(tmp_path):
    """A PATH with stand-ins for cmake, compute-sanitizer and PY that log every call (PY runs the real Python for
    the sanitizer script and the pytest probe, and does nothing for doctor and pytest), and a harness file."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    _executable(bin_dir / "cmake", f'#!/bin/sh\necho "cmake $*" >> {log}\n')
    _executable(bin_dir / "python3", f"""#!/bin/sh
echo "PY cwd=$(pwd) PYTHONPATH=${{PYTHONPATH-}} $*" >> {log}
case "$1" in scripts/sanitize_harness.py|-c) exec {sys.executable} "$@";; esac
exit 0
""")
    memcheck = _memcheck(PROBE, OOM, "# 510 checks, 0 failed", errors=2)
    racecheck = _racecheck(CUBLAS_RACE, "# 510 checks, 0 failed", errors=1)
    _executable(bin_dir / "compute-sanitizer", f"""#!/bin/sh
echo "compute-sanitizer $*" >> {log}
if [ "$2" = memcheck ]; then cat <<'EOF'
{memcheck}
EOF
[ -n "$OUR_BUG" ] && cat <<'EOF'
{OUR_READ}
EOF
else cat <<'EOF'
{racecheck}
EOF
fi
exit 0
""")
    build = tmp_path / "build"
    build.mkdir()
    _executable(build / "trt_plugin_gpu_harness", "#!/bin/sh\nexit 0\n")
    return bin_dir, log, build


def _make(tmp_path, bin_dir, build, path_dirs=None, **env):
    path = os.pathsep.join([str(bin_dir), *(path_dirs or []), "/usr/bin", "/bin"])
    return subprocess.run(["make", "--no-print-directory", "gpu-check", "PY=python3", f"BUILD={build}",
                           f"SANITIZER_OUT={tmp_path / 'sanitizer'}"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"PATH": path, "HOME": str(tmp_path), **env})


def test_make_gpu_check_runs_everything_with_the_given_python_and_nothing_installed(tmp_path, fake_machine):
    bin_dir, log, build = fake_machine
    proc = _make(tmp_path, bin_dir, build)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = log.read_text().splitlines()
    py = [c for c in calls if c.startswith("PY ")]
    assert any(c.startswith("cmake -S plugins_trt") for c in calls) and any("--build" in c for c in calls)
    assert f"PY cwd={REPO} PYTHONPATH=. -m pipeline doctor --output outputs/doctor" in py
    assert any(c.startswith(f"PY cwd={REPO} PYTHONPATH=. -m pytest -q -m gpu") for c in py)
    # the scoreboard right after doctor (its numbers first: a call cut short keeps them), the sanitizer last
    board = f"PY cwd={REPO} PYTHONPATH=. scripts/gpu_scoreboard.py --output outputs/gpu-check"
    doctor = calls.index(f"PY cwd={REPO} PYTHONPATH=. -m pipeline doctor --output outputs/doctor")
    assert doctor < calls.index(board) < min(i for i, c in enumerate(calls) if "-m pytest -q -m gpu" in c)
    sanitized = calls.index(next(c for c in calls if c.startswith("compute-sanitizer")))
    assert max(i for i, c in enumerate(calls) if "-m pytest" in c or c == board) < sanitized
    assert calls[-1] == board + " --show"  # the table once more, last
    assert not [c for c in py if re.search(r"-m (pip|venv|ensurepip)(\s|$)", c)]  # nothing installed, no venv
    sanitizer = [c for c in calls if c.startswith("compute-sanitizer")]
    harness = str(build / "trt_plugin_gpu_harness")
    assert sanitizer == [f"compute-sanitizer --tool memcheck --leak-check full --print-limit 0 {harness}",
                         f"compute-sanitizer --tool racecheck --print-limit 0 {harness}"]
    assert "1 hazard(s) inside cuBLAS's own kernels" in proc.stdout and "2 planted out-of-memory" in proc.stdout
    assert (tmp_path / "sanitizer" / "memcheck.log").is_file()


def test_make_gpu_check_fails_on_an_error_in_our_kernels(tmp_path, fake_machine):
    bin_dir, _, build = fake_machine
    proc = _make(tmp_path, bin_dir, build, OUR_BUG="1")
    assert proc.returncode != 0 and "FAIL: Invalid __global__ read" in proc.stdout, proc.stdout + proc.stderr


def test_make_gpu_check_without_compute_sanitizer_says_so(tmp_path, fake_machine):
    bin_dir, log, build = fake_machine
    (bin_dir / "compute-sanitizer").unlink()
    if shutil.which("compute-sanitizer", path="/usr/bin:/bin"):
        pytest.skip("compute-sanitizer is installed system-wide here")
    proc = _make(tmp_path, bin_dir, build)
    assert proc.returncode == 0 and "compute-sanitizer is not installed" in proc.stderr, proc.stderr


@pytest.mark.slow  # imports every test module in a fresh interpreter (10 s idle, a minute on the loaded 2-core box)
def test_gpu_tests_collect_without_the_optional_packages(tmp_path):
    """`pytest -m gpu` on a GPU machine's bare Python (`.[gpu] torch pytest`): optional packages missing must not
    break collection; modules that export (torch.onnx needs onnxscript) skip saying why."""
    # onnxscript: the export extra's; isal and torchvision: not on a GPU box's stock Python either
    for name in ("spandrel", "safetensors", "hypothesis", "onnxscript", "isal", "torchvision"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"raise ModuleNotFoundError('{name} is blocked for this test')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    # hypothesis's own pytest plugin (an entry point of the installed package) would not exist there either
    args = ["--collect-only", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
    proc = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and "error" not in proc.stdout.lower(), proc.stdout[-3000:]
    assert "tests collected" in proc.stdout
    for test in ("test_trt_backend_matches_torch", "test_deform_conv2d_gpu", "test_device_backends_pixels_equal"):
        assert test in proc.stdout
    assert "tests/test_export_core.py" in proc.stdout and "needs onnxscript" in proc.stdout  # skipped, with why
