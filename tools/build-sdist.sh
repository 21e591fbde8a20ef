#!/usr/bin/env bash
# make sdist: BUILD_DIR/sdist/blocklab-VERSION.tar.gz, with the header-only libraries (nlohmann/json, CLI11,
# xxHash) in its third_party/ (tools/vendor-headers.sh), so that `pip install` of it needs only a C++20 compiler
# with OpenMP (CMake comes from PyPI). Tools from PyPI (build, scikit-build-core, nanobind) in BUILD_DIR/venv.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
venv="$build_dir/venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if ! "$venv/bin/python" -c "import build, scikit_build_core, nanobind" 2> /dev/null; then
  "$venv/bin/python" -m pip --disable-pip-version-check -q install build "scikit-build-core>=0.10" "nanobind>=2.0" ||
    { echo "make sdist: could not install build and scikit-build-core from PyPI into $venv" >&2; exit 1; }
fi
tools/vendor-headers.sh
rm -rf "$build_dir/sdist"
"$venv/bin/python" -m build -q --sdist --no-isolation -o "$build_dir/sdist" . > "$build_dir/sdist.log" 2>&1 ||
  { cat "$build_dir/sdist.log"; exit 1; }
sdist=$(ls "$build_dir"/sdist/blocklab-*.tar.gz)
listing=$(tar -tzf "$sdist")
for f in third_party/include/nlohmann/json.hpp third_party/include/CLI/CLI.hpp third_party/include/xxhash.h \
         third_party/licenses/libxxhash-dev.copyright; do
  grep -q "^blocklab-[^/]*/$f\$" <<< "$listing" || { echo "make sdist: $f is not in $sdist" >&2; exit 1; }
done
echo "$(du -h "$sdist" | cut -f1)  $sdist"
