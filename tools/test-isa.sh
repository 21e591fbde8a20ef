#!/usr/bin/env bash
# `make test-isa`: the test suite on the instruction sets below this CPU's, so that a machine with AVX-512
# also checks what users on AVX2-only CPUs (AMD Zen 2/3, Intel client cores) and older ones run.
#
#   tools/test-isa.sh [BUILD_DIR]   (default build; built by `make build`)
#
#  1. The whole ctest suite with BLOCKLAB_ISA=avx2, then with BLOCKLAB_ISA=generic: every kernel capped at
#     that level (oneDNN too, bf16_onednn.cpp). The suite's 1-vs-2-thread tests (bit-identical results for
#     any thread count) run at each level this way; the skipped tests are listed with each level.
#  2. Test programs under `qemu-x86_64 -cpu Haswell` (Debian's qemu-user, installed here where missing): a
#     CPU whose CPUID has AVX2 and FMA but no AVX-512, so the library's own CPU checks, oneDNN and
#     __builtin_cpu_supports all see an AVX2-only CPU. Tests that need what it lacks must skip with a reason.
#     QEMU follows no exec (and no binfmt_misc entry runs x86-64 programs under it on an x86-64 machine), so
#     BLOCKLAB_TEST_CLI_LAUNCHER (tests/cli_runner.h) runs the CLI the tests start under the same emulator.
#     QEMU_SUBSET below keeps this part to a few minutes (see there).
#
# Prints each part's wall time, and the number of tests passed and skipped under QEMU. Exit status 1 when
# a test fails, 2 on bad input.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
jobs=${JOBS:-$(nproc)}
[ -f "$build_dir/CTestTestfile.cmake" ] || { echo "test-isa: no build in $build_dir (make build first)" >&2; exit 2; }
build_dir=$(cd "$build_dir" && pwd)
status=0

# 1. BLOCKLAB_ISA levels, native.
for level in avx2 generic; do
  start=$SECONDS
  log=$(mktemp)
  if (cd "$build_dir" && BLOCKLAB_ISA=$level ctest --output-on-failure -j "$jobs") > "$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    cat "$log"
  fi
  summary=$(grep -E '^[0-9]+% tests passed' "$log" || echo "no ctest summary")
  echo "test-isa: BLOCKLAB_ISA=$level: $result: $summary ($((SECONDS - start)) s)"
  sed -n -E 's/^[[:space:]]*[0-9]+ - (.*) \((Skipped|Not Run|Disabled)\)$/  \2: \1/p' "$log"
  rm -f "$log"
done

# 2. Under qemu-x86_64 -cpu Haswell (x86-64 hosts only: QEMU here emulates the same architecture).
#
# QEMU_SUBSET: the test programs and gtest filters run under QEMU. Emulated code runs some 20-200x slower than
# native, and code running on 2 threads slower still (a tiled-attention gradient check: 0.5 s native, 100-130 s
# here; a model's 1-vs-2-thread identity check: 20 ms native, 2-4 s here, 250 s for the 77 variants), so the whole
# suite would take hours. What QEMU adds to part 1 is the CPU itself: CPUID without AVX-512, so the run-time
# dispatch (the library's checks, oneDNN's, __builtin_cpu_supports) chooses for real; the AVX2 and generic code
# paths themselves ran in part 1 with every test. So the subset holds every test that asks the CPU what it has (the
# bf16 and oneDNN GEMMs, the sgemm dispatch, the ISA levels, bf16 training, `blocklab bench`: its MFU lines, the
# refusal of a forced GEMM path and bf16's fall back to fp32), the kernel and block gradient checks with small
# shapes, the model tests (the 1-vs-2-thread identity of five variants: the seed model, GPT-2, Qwen3 with GQA, SD
# and a hyper-connection stack), one whole-model gradient check, the float PyTorch parity and Hugging Face kernel
# tests, and `blocklab train`'s. Left out (part 1 runs each of them at BLOCKLAB_ISA=avx2, natively): the
# tiled-attention gradient checks, the largest sgemm shape, all but one of the whole-model gradient checks and all
# but five of the whole-model thread-count checks, the hyper-connection mixing gradients and the init statistics
# (tens of thousands of model evaluations), the trainer's multi-step 1-vs-2-thread runs and the learnability runs,
# the double-precision PyTorch parity (its float twin stays), and the tests that signal a running CLI
# (tests/spawn.h: under QEMU a signal reaches the emulator). About 4 minutes on a 2-core Intel Xeon; the previous,
# larger subset took 15.
QEMU_SUBSET=(
  "test_bf16_onednn:*"
  "test_bf16_gemm:*"
  "test_bf16_training:*"
  "test_sgemm:*-*64x384x520*"
  "test_isa:*"
  "test_cli_bench:*"
  "test_kernels:*-*Tiled*"
  "test_kernels_block:*-*Tiled*"
  "test_model:*-*EveryParameterGradient*:*ThreadCountDoesNotChangeResults*:HyperConnections.MixingGradients*:InitSchemes.StandardDeviations*:HyperConnections.OneStaticStreamIsPreLNBitForBit"
  "test_model:*EveryParameterGradient*/seed_pre_layernorm:*ThreadCountDoesNotChangeResults/seed_pre_layernorm:*ThreadCountDoesNotChangeResults/gpt2:*ThreadCountDoesNotChangeResults/qwen3_gqa:*ThreadCountDoesNotChangeResults/sd:*ThreadCountDoesNotChangeResults/mhc_dynamic_n3"
  "test_hf_kernels:*"
  "test_reference_parity:*FloatMatches*"
  "test_train:*-*Learnability*:Trainer.*BitIdentical*"
  "test_cli_train:*"
)
if [ "$(uname -m)" != x86_64 ]; then
  echo "test-isa: qemu part left out: not an x86-64 machine ($(uname -m))"
  exit $status
fi
if ! command -v qemu-x86_64 > /dev/null; then
  echo "test-isa: installing qemu-user (qemu-x86_64)"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q > /dev/null
  $sudo apt-get install -y -q --no-install-recommends qemu-user > /dev/null
fi
# Haswell less the features QEMU's TCG lacks (it warns about each on stderr otherwise, in every process,
# which the CLI tests' one-line checks would count).
qemu=(qemu-x86_64 -cpu Haswell,-pcid,-x2apic,-tsc-deadline,-hle,-invpcid,-rtm)
# blocklab's programs set these two and exec themselves again where they are unset (util/threads.h); QEMU
# would run that second program natively, so they are set here, with the same values.
export OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=3000
start=$SECONDS
passed=0 skipped=0 failed=0
for entry in "${QEMU_SUBSET[@]}"; do
  program=${entry%%:*} filter=${entry#*:}
  log=$(mktemp)
  t0=$SECONDS
  if BLOCKLAB_TEST_CLI_LAUNCHER="${qemu[*]}" "${qemu[@]}" "$build_dir/$program" --gtest_filter="$filter" \
       > "$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    cat "$log"
  fi
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  passed=$((passed + ${p:-0})) skipped=$((skipped + ${s:-0})) failed=$((failed + ${f:-0}))
  echo "test-isa: qemu Haswell: $program ($filter): $result, ${p:-0} passed, ${s:-0} skipped ($((SECONDS - t0)) s)"
  # the reasons of the skips, each with its count (gtest prints a reason on the line after "FILE:LINE: Skipped")
  sed -n '/: Skipped$/{n;p}' "$log" | sort | uniq -c |
    sed 's/^ *\([0-9]*\) /  skipped \1x: /'

  rm -f "$log"
done
echo "test-isa: qemu-x86_64 -cpu Haswell: $passed passed, $skipped skipped, $failed failed ($((SECONDS - start)) s)"
exit $status
