#!/usr/bin/env bash
# Fetches include/ of the NVIDIA/TensorRT release that matches the installed `tensorrt` Python package (or
# TRT_VERSION) into DEST_ROOT/<major.minor.patch>/include, where `make plugins` (CMake) looks for TensorRT headers.
# For machines where TensorRT came from pip, which ships no C++ headers. Used by `make trt-headers`.
#   scripts/trt_headers.sh [PYTHON] [DEST_ROOT]     (defaults: python3, build/trt-headers — git-ignored)
#   TRT_GIT_URL   repository to fetch from (default: NVIDIA's public one; a test points it at a local repository)
#   TRT_VERSION   version to fetch instead of asking PYTHON for tensorrt.__version__
# Tries the tag v<major.minor.patch>, then the branch release/<major.minor>. Nothing fetched is committed.
set -euo pipefail
py=${1:-python3}
dest_root=${2:-build/trt-headers}
url=${TRT_GIT_URL:-https://github.com/NVIDIA/TensorRT.git}
version=${TRT_VERSION:-}
if [ -z "$version" ]; then
  version=$("$py" -c 'import tensorrt; print(tensorrt.__version__)' 2>/dev/null) || version=""
fi
if [ -z "$version" ]; then
  echo "error: tensorrt is not importable by $py: install it (pip install tensorrt) or pass TRT_VERSION=X.Y.Z" >&2
  exit 2
fi
IFS=. read -r major minor patch _ <<<"$version"
if [ -z "$major" ] || [ -z "${minor:-}" ]; then
  echo "error: cannot read a TensorRT version from '$version' (want X.Y[.Z])" >&2
  exit 2
fi
release="$major.$minor.${patch:-0}"
dest="$dest_root/$release"
if [ -f "$dest/include/NvInferRuntime.h" ]; then
  echo "trt-headers: TensorRT $release headers already in $dest/include"
  exit 0
fi
command -v git >/dev/null || { echo "error: git is needed to fetch the TensorRT headers" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git init -q "$tmp/repo"
fetched=""
for ref in "refs/tags/v$release" "refs/heads/release/$major.$minor"; do
  if git -C "$tmp/repo" fetch -q --depth 1 "$url" "$ref" 2>"$tmp/err"; then
    fetched=$ref
    break
  fi
done
if [ -z "$fetched" ]; then
  echo "error: could not fetch TensorRT $release from $url (tried tag v$release and branch release/$major.$minor):" \
       "$(tail -n 1 "$tmp/err")" >&2
  exit 1
fi
mkdir -p "$tmp/out"
if ! git -C "$tmp/repo" archive FETCH_HEAD include | tar -x -C "$tmp/out" || [ ! -f "$tmp/out/include/NvInferVersion.h" ]; then
  echo "error: $fetched of $url has no include/NvInferVersion.h" >&2
  exit 1
fi
got=$(awk '/#define (TRT|NV_TENSORRT)_(MAJOR|MINOR)(_ENTERPRISE)? /{printf "%s%s", sep, $3; sep="."; if (++n == 2) exit}' \
      "$tmp/out/include/NvInferVersion.h")
if [ "$got" != "$major.$minor" ]; then
  echo "error: $fetched of $url holds TensorRT $got headers, not $major.$minor" >&2
  exit 1
fi
mkdir -p "$dest_root"
rm -rf "$dest"
mv "$tmp/out" "$dest"
echo "trt-headers: TensorRT $release headers ($fetched of $url) in $dest/include; \`make plugins\` finds them there"
