"""`make trt-headers` fetches include/ of the TensorRT release matching the installed version from a git repository
(here a local one standing in for NVIDIA/TensorRT), and CMake says which TensorRT headers it used."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VERSION_H = """#define TRT_MAJOR_ENTERPRISE {0}
#define TRT_MINOR_ENTERPRISE {1}
#define TRT_PATCH_ENTERPRISE {2}
#define NV_TENSORRT_MAJOR TRT_MAJOR_ENTERPRISE
"""

pytestmark = pytest.mark.skipif(shutil.which("git") is None or shutil.which("make") is None,
                                reason="git and make are needed")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                   capture_output=True)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Path:
    """A repository laid out like NVIDIA/TensorRT: tag v11.1.0 and branch release/11.2 (no 11.2.x tag)."""
    repo = tmp_path_factory.mktemp("TensorRT")
    _git(repo, "init", "-q", "-b", "main")
    (repo / "include").mkdir()
    (repo / "plugin").mkdir()
    (repo / "plugin" / "README.md").write_text("not fetched\n")
    for version, ref in (((11, 1, 0), "tag"), ((11, 2, 1), "branch")):
        (repo / "include" / "NvInferVersion.h").write_text(VERSION_H.format(*version))
        (repo / "include" / "NvInferRuntime.h").write_text("// headers\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", ".".join(map(str, version)))
        if ref == "tag":
            _git(repo, "tag", "v11.1.0")
        else:
            _git(repo, "branch", "release/11.2")
    return repo


def _make(dest: Path, url: Path, version: str, **extra) -> subprocess.CompletedProcess:
    args = ["make", "--no-print-directory", "trt-headers", f"TRT_GIT_URL={url}", f"TRT_VERSION={version}",
            f"TRT_HEADERS_DIR={dest}", *[f"{k}={v}" for k, v in extra.items()]]
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_fetches_the_tag_matching_the_version(upstream, tmp_path):
    proc = _make(tmp_path, upstream, "11.1.0.106")  # tensorrt.__version__ carries a build number
    assert proc.returncode == 0, proc.stderr
    include = tmp_path / "11.1.0" / "include"
    assert "TRT_MINOR_ENTERPRISE 1" in (include / "NvInferVersion.h").read_text()
    assert not (tmp_path / "11.1.0" / "plugin").exists()  # include/ only
    assert "refs/tags/v11.1.0" in proc.stdout
    again = _make(tmp_path, upstream, "11.1.0")
    assert again.returncode == 0 and "already" in again.stdout


def test_falls_back_to_the_release_branch(upstream, tmp_path):
    proc = _make(tmp_path, upstream, "11.2.1")
    assert proc.returncode == 0, proc.stderr
    assert "refs/heads/release/11.2" in proc.stdout
    assert "TRT_PATCH_ENTERPRISE 1" in (tmp_path / "11.2.1" / "include" / "NvInferVersion.h").read_text()


def test_unknown_release_is_one_error_line(upstream, tmp_path):
    proc = _make(tmp_path, upstream, "12.0.0")
    assert proc.returncode != 0
    assert "error: could not fetch TensorRT 12.0.0" in proc.stderr and "release/12.0" in proc.stderr
    assert not (tmp_path / "12.0.0").exists()


def test_without_tensorrt_it_asks_for_a_version(tmp_path):
    proc = _make(tmp_path, tmp_path / "nowhere", "", PY=str(tmp_path / "no-python"))
    assert proc.returncode != 0 and "TRT_VERSION" in proc.stderr


def test_fetched_headers_stay_out_of_git():
    ignored = subprocess.run(["git", "check-ignore", "build/trt-headers/11.1.0/include/NvInfer.h"], cwd=REPO,
                             capture_output=True, text=True)
    assert ignored.returncode == 0


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake not installed")
def test_cmake_reports_which_headers_it_used(upstream, tmp_path):
    assert _make(tmp_path / "headers", upstream, "11.1.0").returncode == 0
    root = tmp_path / "headers" / "11.1.0"
    base = ["cmake", "-S", str(REPO / "plugins_trt"), "-DSR_ENABLE_CUDA=OFF"]
    env = {k: v for k, v in os.environ.items() if k != "TENSORRT_ROOT"}
    used = subprocess.run(base + ["-B", str(tmp_path / "b1"), f"-DTENSORRT_ROOT={root}"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert used.returncode == 0, used.stderr
    # The headers were found and named; the library itself then needs the CUDA kernels, off here.
    assert f"TensorRT headers 11.1.0 were found in {root}/include (TENSORRT_ROOT)" in used.stdout, used.stdout
    wrong = subprocess.run(base + ["-B", str(tmp_path / "b2"), f"-DTENSORRT_ROOT={tmp_path / 'nothing'}"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert wrong.returncode == 0
    assert "has no NvInferVersion.h" in wrong.stdout and "make trt-headers" in wrong.stdout
