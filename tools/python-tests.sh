#!/usr/bin/env bash
# The Python package's tests: a virtual environment in BUILD_DIR/venv with the test requirements from PyPI,
# the package built and installed from this tree (`pip install .`, linking BUILD_DIR's blocklab_core and CLI
# instead of compiling them again), the wheel of `make wheel` built from the same build directory
# (tools/build-wheel.sh), then pytest over python/tests (which also executes the notebooks and installs the
# wheel into a new virtual environment, python/tests/test_wheel.py).
# Without PyPI the tests are skipped with the reason printed; a package that does not build fails.
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
if ! log=$("${pip[@]}" install --timeout 20 --retries 2 -r python/requirements-test.txt 2>&1); then
  echo "$log" | tail -n 5
  echo "python tests skipped: could not install python/requirements-test.txt from PyPI into $venv (see above)"
  exit 0
fi
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" "${pip[@]}" install --no-build-isolation --no-deps --force-reinstall \
  -C build-dir="$build_dir/python" -C cmake.define.BLOCKLAB_CORE_BUILD="$build_dir" .
JOBS="$jobs" ./tools/build-wheel.sh "$build_dir" > "$build_dir/wheel.log" 2>&1 || { cat "$build_dir/wheel.log"; exit 1; }
tail -n 1 "$build_dir/wheel.log"
BLOCKLAB_WHEELHOUSE="$build_dir/wheelhouse" "$venv/bin/python" -m pytest -q python/tests
