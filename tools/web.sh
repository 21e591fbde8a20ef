#!/usr/bin/env bash
# The browser build (cmake/web.cmake): blocklab's core compiled for WebAssembly (wasm32, SIMD128, one thread) with
# Debian's emscripten in WEB_DIR (default build-web), and the page that runs on it in WEB_DIR/dist.
#   tools/web.sh build          the module, the page, the wasm tests and the CLI for Node          (make web)
#   tools/web.sh serve [PORT]   serves WEB_DIR/dist on 127.0.0.1 (default port 8000)                (make web-serve)
#   tools/web.sh test NATIVE    the kernel and model tests under Node, then the page in headless Chromium against
#                               the native CLI NATIVE (tools/test-web-page.py), screenshots in WEB_DIR/screenshots
#                                                                                                  (make test-web)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${WEB_DIR:-build-web}
jobs=${JOBS:-$(nproc)}
# Emscripten's JS optimiser loads acorn with require(); Debian keeps Node modules in /usr/share/nodejs, which a
# Node from elsewhere (e.g. NodeSource's) does not search.
export NODE_PATH=/usr/share/nodejs${NODE_PATH:+:$NODE_PATH}

build() {
  ./tools/install-deps.sh --web
  emcmake cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$dir" -j "$jobs"
  echo "the page: $dir/dist (make web-serve, then http://127.0.0.1:8000/)"
}

case "${1:-}" in
  build) build ;;
  serve)
    port=${2:-8000}
    [ -f "$dir/dist/index.html" ] || build
    echo "serving $dir/dist on http://127.0.0.1:$port/ (Ctrl-C stops)"
    exec python3 -m http.server "$port" --bind 127.0.0.1 --directory "$dir/dist" ;;
  test)
    native=${2:?usage: tools/web.sh test NATIVE_CLI}
    build
    (cd "$dir" && ctest --output-on-failure -j "$jobs")
    # selenium from PyPI, in a virtual environment of the browser build's own
    [ -x "$dir/venv/bin/python" ] || python3 -m venv "$dir/venv"
    "$dir/venv/bin/python" -c "import selenium" 2>/dev/null || "$dir/venv/bin/pip" install -q selenium
    "$dir/venv/bin/python" tools/test-web-page.py "$dir/dist" "$native" "$dir/screenshots" ;;
  *) echo "usage: tools/web.sh build | serve [PORT] | test NATIVE_CLI" >&2; exit 2 ;;
esac
