#!/usr/bin/env bash
# Fuzz smoke test with libFuzzer + ASan + UBSan, one target after the other:
#   safetensors   the safetensors parser and its checksums (src/io/safetensors.cpp), fuzz/fuzz_safetensors.cpp
#   config        the TOML run-config parser (src/train/run_config.cpp), fuzz/fuzz_config.cpp
#
#   fuzz/run-smoke.sh [SECONDS] [TARGET...]   # SECONDS per target, default 20; default: every target
#
# Installs clang and its libFuzzer runtime from Debian if missing, builds into build-fuzz/ (outside
# the CMake build), generates a small seed corpus of valid inputs, then fuzzes each target for SECONDS.
# The corpora grow across runs in build-fuzz/corpus (safetensors) and build-fuzz/corpus-config;
# crashing inputs land in build-fuzz/artifacts/ and build-fuzz/artifacts-config/.
# Exit status: 0 when no crash was found, non-zero otherwise.
# Environment: CLANGXX (compiler to use), FUZZ_MAX_LEN (default 8192), FUZZ_EXTRA_ARGS (passed to
# the fuzzer, e.g. "-jobs=4").
set -euo pipefail

secs="${1:-20}"
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: $0 [seconds] [safetensors|config ...]   (seconds per target, a positive integer, default 20)" >&2
  exit 2
fi
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors config)
for t in "${targets[@]}"; do
  case "$t" in
    safetensors | config) ;;
    *) echo "unknown fuzz target '$t' (expected safetensors or config)" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/build-fuzz"
mkdir -p "$out"

# --- compiler with libFuzzer ----------------------------------------------------------------------
find_clang() {
  local c
  for c in "${CLANGXX:-}" clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    [ -n "$c" ] && command -v "$c" > /dev/null 2>&1 && { echo "$c"; return 0; }
  done
  return 1
}

have_libfuzzer() {
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
    > "$out/probe.cpp"
  "$1" -fsanitize=fuzzer,address,undefined "$out/probe.cpp" -o "$out/probe" > /dev/null 2>&1
}

apt_install() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  echo "installing: $*"
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "$@"
}

cxx="$(find_clang || true)"
if [ -z "$cxx" ]; then
  apt_install clang
  cxx="$(find_clang)"
fi
if ! have_libfuzzer "$cxx"; then
  major="$("$cxx" -dumpversion | cut -d. -f1)"
  apt_install "libclang-rt-${major}-dev" || apt_install libclang-rt-dev
  have_libfuzzer "$cxx" || { echo "error: $cxx cannot link -fsanitize=fuzzer" >&2; exit 1; }
fi
rm -f "$out/probe.cpp" "$out/probe"

# --- build (only when an input is newer than the binary) ------------------------------------------
common=(-std=c++20 -g -O1 -I"$root/src" -Wall -Wextra -Wno-unknown-pragmas)
fuzz_flags=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
seedgen_flags=(-DBLOCKLAB_FUZZ_SEEDGEN)

# build BINARY FLAGS_ARRAY_NAME INPUT...: compiles the .cpp inputs; every input (and this script) counts
# for staleness.
build() {
  local bin="$1" f stale=0
  local -n flags="$2"
  shift 2
  [ -x "$bin" ] || stale=1
  for f in "$@" "$0"; do [ "$f" -nt "$bin" ] && stale=1; done
  [ "$stale" -eq 0 ] && return 0
  local -a sources=()
  for f in "$@"; do [[ "$f" == *.cpp ]] && sources+=("$f"); done
  echo "building $bin with $cxx"
  "$cxx" "${common[@]}" "${flags[@]}" "${sources[@]}" -o "$bin" -lxxhash
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

# --- safetensors ----------------------------------------------------------------------------------
run_safetensors() {
  local inputs=("$root/fuzz/fuzz_safetensors.cpp" "$root/src/io/safetensors.cpp" "$root/src/io/dtype.cpp"
                "$root/src/io/atomic_file.cpp" "$root/src/io/checksum.cpp" "$root/src/util/error.cpp"
                "$root/src/util/shape.cpp" "$root/src/util/shape.h"
                "$root/src/io/safetensors.h" "$root/src/io/dtype.h" "$root/src/io/atomic_file.h"
                "$root/src/io/checksum.h" "$root/src/util/error.h")
  build "$out/fuzz_safetensors" fuzz_flags "${inputs[@]}"
  build "$out/make_seeds" seedgen_flags "${inputs[@]}"

  rm -rf "$out/seeds"
  mkdir -p "$out/seeds" "$out/corpus" "$out/artifacts"
  "$out/make_seeds" "$out/seeds"

  cat > "$out/safetensors.dict" <<'DICT'
"dtype"
"shape"
"data_offsets"
"__metadata__"
"F64"
"F32"
"F16"
"BF16"
"I64"
"I32"
"I16"
"I8"
"U8"
"BOOL"
"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}"
"18446744073709551615"
"9223372036854775807"
"4294967296"
"-1"
"[0,0]"
"[]"
"        "
"\xff\xff\xff\xff\xff\xff\xff\x7f"
"\x00\x00\x00\x00\x00\x00\x00\x00"
DICT

  echo "fuzzing safetensors for ${secs}s (corpus: $out/corpus, artifacts: $out/artifacts/)"
  # shellcheck disable=SC2086
  "$out/fuzz_safetensors" \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="${FUZZ_MAX_LEN:-8192}" \
    -dict="$out/safetensors.dict" -artifact_prefix="$out/artifacts/" -print_final_stats=1 \
    ${FUZZ_EXTRA_ARGS:-} "$out/corpus" "$out/seeds"
  echo "fuzz smoke (safetensors): no crash in ${secs}s"
}

# --- TOML run config --------------------------------------------------------------------------------
# toml++'s internal TOML_ASSERTs are compiled out here, as in every release build (NDEBUG): toml++ 3.3
# asserts on some invalid documents (e.g. "[,") that it then rejects cleanly with a parse error. Real faults
# still stop the fuzzer through ASan/UBSan (including __builtin_unreachable, which the parser reaches for
# some non-ASCII input unless src/train/run_config.cpp screens it first).
config_flags=("${fuzz_flags[@]}" "-DTOML_ASSERT(expr)=static_cast<void>(0)")
config_seedgen_flags=("${seedgen_flags[@]}" "-DTOML_ASSERT(expr)=static_cast<void>(0)")

run_config() {
  local inputs=("$root/fuzz/fuzz_config.cpp" "$root/src/train/run_config.cpp" "$root/src/model/config.cpp"
                "$root/src/train/optimizer.cpp" "$root/src/train/schedule.cpp" "$root/src/util/error.cpp"
                "$root/src/train/run_config.h" "$root/src/model/config.h" "$root/src/train/optimizer.h"
                "$root/src/train/schedule.h" "$root/src/util/error.h")
  build "$out/fuzz_config" config_flags "${inputs[@]}"
  build "$out/make_config_seeds" config_seedgen_flags "${inputs[@]}"

  rm -rf "$out/seeds-config"
  mkdir -p "$out/seeds-config" "$out/corpus-config" "$out/artifacts-config"
  "$out/make_config_seeds" "$out/seeds-config" "$out/config.dict"

  echo "fuzzing the TOML config parser for ${secs}s (corpus: $out/corpus-config, artifacts: $out/artifacts-config/)"
  # shellcheck disable=SC2086
  "$out/fuzz_config" \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="${FUZZ_MAX_LEN:-8192}" \
    -dict="$out/config.dict" -artifact_prefix="$out/artifacts-config/" -print_final_stats=1 \
    ${FUZZ_EXTRA_ARGS:-} "$out/corpus-config" "$out/seeds-config"
  echo "fuzz smoke (config): no crash in ${secs}s"
}

for t in "${targets[@]}"; do "run_$t"; done
