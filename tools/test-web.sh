#!/usr/bin/env bash
# make test-web: blocklab's core compiled for WebAssembly (wasm32, SIMD128, one thread) with Debian's
# emscripten in BUILD_DIR (default build-web), and its kernel and model tests run under Node (cmake/web.cmake
# lists them), with the CLI's `--version` naming the wasm_simd128 level.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-web}
jobs=${JOBS:-$(nproc)}
./tools/install-deps.sh --web
# Emscripten's JS optimiser loads acorn with require(); Debian keeps Node modules in /usr/share/nodejs, which a
# Node from elsewhere (e.g. NodeSource's) does not search.
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}
emcmake cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$dir" -j "$jobs"
cd "$dir"
ctest --output-on-failure -j "$jobs"
