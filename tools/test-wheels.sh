#!/usr/bin/env bash
# make test-wheels: the wheels of `make wheel-portable` (PORTABLE_DIR/wheelhouse) installed as a user would,
# into a fresh virtual environment in Debian roots that have no compiler:
#   bullseye  Debian 11: glibc 2.31 (the oldest the wheels are tagged for), Python 3.9 -> the cp39 wheel
#   bookworm  Debian 12: glibc 2.36, Python 3.11                                     -> the cp311 wheel
#   trixie    Debian 13: glibc 2.41, Python 3.13                                     -> the cp312-abi3 wheel
# Each root is made once by debootstrap (tools/debian-root.sh; PORTABLE_DIR/roots/SUITE-amd64-test, kept) with
# python3 and python3-venv only. In each: numpy from PyPI, the wheel pip picks from the wheelhouse (--no-index),
# `blocklab --version`, build_info() (OpenBLAS, oneDNN and MPI absent, the text task present), then the CLI
# trains on text and samples, trains a qwen3 block and exports it as a Hugging Face directory that `probe
# logits` reads back, and the Python API trains (the loss falls) and samples; in bullseye also the notebook
# docs/notebooks/post_ln_vs_pre_ln.ipynb from top to bottom (nbclient). Prints each step's time. Where the
# wheelhouse has aarch64 wheels (make wheel-portable PORTABLE_ARM64=1), the cp39 one under qemu-aarch64 too
# (the end of this script).
#
#   tools/test-wheels.sh [PORTABLE_DIR]     (default build-portable)
#   TEST_WHEELS_SUITES="bullseye trixie"    only these
set -euo pipefail
cd "$(dirname "$0")/.."
portable_dir=$(cd "${1:-build-portable}" && pwd)
wheelhouse="$portable_dir/wheelhouse"
ls "$wheelhouse"/blocklab-*.whl > /dev/null 2>&1 || { echo "test-wheels: no wheels in $wheelhouse (make wheel-portable)" >&2; exit 2; }
suites=${TEST_WHEELS_SUITES:-bullseye bookworm trixie}
arch=amd64
status=0
for suite in $suites; do
  root="$portable_dir/roots/$suite-$arch-test"
  tools/debian-root.sh make "$root" "$suite" "$arch" python3 python3-venv
  rm -rf "$root/wheels" "$root/work"
  mkdir -p "$root/wheels" "$root/work"
  cp "$wheelhouse"/blocklab-*.whl "$root/wheels/"
  cp tests/data/web_ruth_jonah.txt "$root/work/book.txt"
  cp tools/wheel_api_check.py "$root/work/"
  # the notebook, in the oldest root: a user's notebook session on Debian 11's Python 3.9
  [ "$suite" = bullseye ] && cp docs/notebooks/post_ln_vs_pre_ln.ipynb "$root/work/notebook.ipynb"
  echo "== $suite ($arch)"
  started=$(date +%s)
  if ! tools/debian-root.sh run "$root" 'set -euo pipefail
    t() {  # COMMAND...: run it, then print its wall time and the start of the command line
      local t0 t1 cmd="$*"; t0=$(date +%s%N); "$@"; t1=$(date +%s%N)
      printf "   [%d.%01d s] %s\n" $(( (t1 - t0) / 1000000000 )) $(( (t1 - t0) / 100000000 % 10 )) "${cmd:0:100}"
    }
    cd /work
    . /etc/os-release; echo "   $PRETTY_NAME, $(ldd --version | head -n 1 | sed "s/.* //") glibc, $(python3 --version)"
    for c in cc gcc g++ c++ clang; do
      if command -v $c > /dev/null; then echo "   a compiler is installed here: $c" >&2; exit 1; fi
    done
    t python3 -m venv /work/venv
    . /work/venv/bin/activate
    t pip install -q numpy
    t pip install -q --no-index --find-links /wheels blocklab
    echo "   installed: $(ls /work/venv/lib/python3*/site-packages | grep -m1 "^blocklab-.*dist-info") from $(pip download -q --no-deps --no-index --find-links /wheels -d /tmp/w blocklab > /dev/null && ls /tmp/w)"
    cd /tmp
    blocklab --version
    python - <<PY
import blocklab
info = blocklab.build_info()
parts = {p["name"]: p["present"] for p in info["optional_parts"]}
print("   build_info: isa", info["isa"], "levels", info["isa_levels"], "parts", parts)
for name in ("OpenBLAS", "oneDNN", "MPI"):
    assert parts[name] is False, name
assert parts["text"] is True
assert blocklab.__file__.startswith("/work/venv/")
PY
    cd /work
    t blocklab train --task text --data book.txt --norm-placement pre --layers 2 --width 64 --heads 4 --seq-len 64 \
      --batch 8 --steps 60 --lr 2e-3 --eval-every 30 --threads 2 --out text-run > train.log 2>&1
    tail -n 2 train.log
    t blocklab sample text-run --prompt "Naomi said" --tokens 60 --temperature 0.8 --top-k 20 --seed 1
    t blocklab train --block qwen3 --layers 2 --width 32 --heads 4 --kv-heads 2 --steps 40 --threads 2 --out q3 > q3.log 2>&1
    tail -n 1 q3.log
    t blocklab export q3 --out hf-q3
    ls hf-q3
    t blocklab probe logits --model hf-q3 --tokens 1,2,3 > probe.log 2>&1
    grep -v "^block " probe.log | head -n 6
    t python wheel_api_check.py text-run
    if [ -f notebook.ipynb ]; then  # docs/notebooks/post_ln_vs_pre_ln.ipynb from top to bottom, as test_notebooks.py
      t pip install -q nbclient nbformat ipykernel matplotlib
      mkdir -p nb && t python - <<PY
import nbclient, nbformat
notebook = nbformat.read("notebook.ipynb", as_version=4)
nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": "nb"}}).execute()
outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
errors = [o for o in outputs if o.get("output_type") == "error"]
assert not errors, errors
text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
assert "last block / first block" in text and "loss" in text, text
images = sum("image/png" in o.get("data", {}) for o in outputs)
print("   notebook: %d cells ran, %d figures" % (sum(c.cell_type == "code" for c in notebook.cells), images))
PY
    fi
    '; then
    echo "test-wheels: $suite FAILED" >&2
    status=1
  fi
  echo "== $suite: $(( $(date +%s) - started )) s"
done

# aarch64, where the wheelhouse has aarch64 wheels (make wheel-portable PORTABLE_ARM64=1): an arm64 bullseye
# root, only unpacked (debootstrap --foreign: no binfmt_misc here to chroot into it), supplies glibc 2.31 and
# Python 3.9 for aarch64; the host's pip installs numpy and the cp39 aarch64 wheel for that platform into a
# directory there (--target), and qemu-aarch64 -L ROOT runs that Python (the API: train, sample) and the
# wheel's CLI (--version, train, sample, export) as a Cortex-A72 (Armv8.0: NEON only) and as `-cpu max`.
if ls "$wheelhouse"/*aarch64.whl > /dev/null 2>&1; then
  root="$portable_dir/roots/bullseye-arm64-test"
  tools/debian-root.sh make "$root" bullseye arm64 python3
  command -v qemu-aarch64 > /dev/null || apt-get install -y -q qemu-user > /dev/null
  venv="$portable_dir/host-venv"
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  echo "== bullseye (arm64, qemu-aarch64)"
  started=$(date +%s)
  t() {
    local t0 t1 cmd="$*"; t0=$(date +%s%N); "$@"; t1=$(date +%s%N)
    printf "   [%d.%01d s] %s\n" $(( (t1 - t0) / 1000000000 )) $(( (t1 - t0) / 100000000 % 10 )) "${cmd:0:100}"
  }
  site="$root/work/site"
  rm -rf "$root/work" && mkdir -p "$root/work"
  cp tests/data/web_ruth_jonah.txt "$root/work/book.txt"
  cp tools/wheel_api_check.py "$root/work/"
  # (pip takes --platform literally: the older manylinux tags that glibc 2.31 also runs are listed too)
  pip=("$venv/bin/pip" install -q --target "$site" --python-version 3.9 --implementation cp --abi cp39
       --only-binary=:all: --platform manylinux_2_31_aarch64 --platform manylinux_2_28_aarch64
       --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64)
  if ! (
    set -e
    t "${pip[@]}" numpy
    t "${pip[@]}" --no-deps --no-index --find-links "$wheelhouse" blocklab
    echo "   installed: $(ls "$site" | grep -m1 '^blocklab-.*dist-info'), $(cat "$site"/blocklab-*.dist-info/WHEEL | grep '^Tag')"
    cd "$root/work"
    for cpu in cortex-a72 max; do
      cli=(qemu-aarch64 -cpu "$cpu" -L "$root" "$site/blocklab/bin/blocklab")
      echo "   -cpu $cpu:"
      "${cli[@]}" --version | sed 's/^/   /'
      t "${cli[@]}" train --task text --data book.txt --norm-placement pre --layers 2 --width 64 --heads 4 \
        --seq-len 64 --batch 8 --steps 30 --lr 2e-3 --eval-every 30 --threads 2 --out "text-$cpu" > train.log 2>&1
      tail -n 1 train.log | sed 's/^/   /'
      t "${cli[@]}" sample "text-$cpu" --prompt "Naomi said" --tokens 40 --temperature 0.8 --top-k 20 --seed 1
      t "${cli[@]}" train --block qwen3 --layers 2 --width 32 --heads 4 --kv-heads 2 --steps 20 --threads 2 \
        --out "q3-$cpu" > q3.log 2>&1
      t "${cli[@]}" export "q3-$cpu" --out "hf-$cpu"
      ls "hf-$cpu"
    done
    t env PYTHONPATH="$site" qemu-aarch64 -L "$root" "$root/usr/bin/python3.9" - <<'PY'
import blocklab, platform
info = blocklab.build_info()
parts = {p["name"]: p["present"] for p in info["optional_parts"]}
print("   python", platform.python_version(), platform.machine(), "build_info: isa", info["isa"],
      "features", info["cpu_features"], "parts", parts)
assert not parts["OpenBLAS"] and not parts["oneDNN"] and not parts["MPI"] and parts["text"]
PY
    t env PYTHONPATH="$site" qemu-aarch64 -L "$root" "$root/usr/bin/python3.9" wheel_api_check.py text-max
  ); then
    echo "test-wheels: bullseye arm64 FAILED" >&2
    status=1
  fi
  echo "== bullseye (arm64): $(( $(date +%s) - started )) s"
fi
exit $status
