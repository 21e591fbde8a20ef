#!/usr/bin/env bash
# Installs the Debian packages blocklab needs to build and test, skipping those already present.
#   tools/install-deps.sh         the native build and its tests
#   tools/install-deps.sh --web   also the browser page: its WebAssembly build and its tests (make web, test-web)
set -euo pipefail
packages=(build-essential cmake pkg-config libopenblas-dev nlohmann-json3-dev libcli11-dev
          libtomlplusplus-dev libxxhash-dev libutf8proc-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev gnuplot-nox
          libopenmpi-dev openmpi-bin
          libdnnl-dev  # oneDNN: the bf16 GEMMs on CPUs with AMX
          clang libomp-dev  # make test-clang: the test suite built with clang++ and LLVM's OpenMP
          fonts-noto-cjk  # Hangul in the figures of `reproduce --lang ko`
          gettext  # msgfmt / xgettext / msgcmp: the Korean catalogue po/ko.po checked against the code (ctest po_complete)
          python3-venv python3-dev)  # the Python package's build and tests (tools/python-tests.sh)
if [ "${1:-}" = "--web" ]; then
  packages+=(emscripten  # em++ (clang 14) and its libc++ for wasm32
             nodejs node-acorn  # runs the wasm tests; acorn is what emscripten's JS optimiser needs
             googletest  # GoogleTest's sources (/usr/src/googletest), compiled with em++ for the tests
             libjs-chart.js  # the page's charts (Chart.js), copied into the site
             chromium chromium-driver)  # the page's test in a headless browser (tools/test-web-page.py)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
