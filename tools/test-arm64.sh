#!/usr/bin/env bash
# `make test-arm64`: blocklab cross-compiled for 64-bit ARM Linux (AArch64) and its test suite run under
# QEMU's user-mode emulator, on an x86-64 Debian machine.
#
#   tools/test-arm64.sh [BUILD_DIR]   (default build-arm64)
#
#  1. Installs what is missing: Debian's cross compiler (g++-aarch64-linux-gnu), qemu-user, and the arm64
#     builds of the libraries blocklab links (multiarch: `dpkg --add-architecture arm64`, then
#     libopenblas-dev:arm64 and the others below), which go to /usr/lib/aarch64-linux-gnu beside the host's.
#  2. Configures BUILD_DIR with cmake/aarch64-linux-gnu.cmake (without MPI, whose x86 compiler wrappers
#     the cross build must not pick up) and builds the CLI and the test programs.
#  3. Runs the ctest suite under qemu-aarch64 twice: with `-cpu max` (NEON, the dot-product, BF16 and I8MM
#     extensions and SVE all present) and with `-cpu cortex-a72` (Armv8.0: NEON only), so that the feature
#     detection meets both kinds of CPU. ctest starts each test program through the emulator
#     (CMAKE_CROSSCOMPILING_EMULATOR); the CLI the tests start runs under it too (BLOCKLAB_TEST_CLI_LAUNCHER,
#     tests/cli_runner.h), since QEMU follows no exec. Each run's passed, failed and skipped counts are printed,
#     with the skips' reasons.
#
# SLOW_UNDER_EMULATION (below) is what the runs leave out, each with its reason. QEMU's timings mean nothing:
# nothing here measures speed.
#
# Exit status 1 when a test fails, 2 on bad input. On a machine that is not x86-64 (an ARM one runs `make test`
# natively) it says so and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-arm64}
jobs=${JOBS:-$(nproc)}
if [ "$(uname -m)" != x86_64 ]; then
  echo "test-arm64: cross-builds on an x86-64 host; this machine is $(uname -m) (run make test on it)"
  exit 0
fi

# 1. Packages.
packages=(g++-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user
          libc6:arm64 libstdc++6:arm64 libgomp1:arm64
          libopenblas-dev:arm64 libxxhash-dev:arm64 libutf8proc-dev:arm64 libpcre2-dev:arm64 libtomlplusplus-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64)
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
update=0
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "test-arm64: adding Debian's arm64 architecture (multiarch)"
  $sudo dpkg --add-architecture arm64
  update=1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] || [ $update -eq 1 ]; then
  echo "test-arm64: installing ${missing[*]}"
  $sudo apt-get update -q > /dev/null
  $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" > /dev/null
fi

# 2. The cross build.
start=$SECONDS
cmake -S . -B "$build_dir" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release \
  -DBLOCKLAB_MPI=OFF -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON > /dev/null
# The test programs list their tests after linking (gtest_discover_tests), under the emulator: it needs the
# same environment as the runs below.
export OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=3000  # blocklab's programs exec themselves again where unset
                                                    # (util/threads.h); QEMU would run that program natively
cmake --build "$build_dir" -j "$jobs"
echo "test-arm64: cross build: $((SECONDS - start)) s"
build_dir=$(cd "$build_dir" && pwd)

# 3. The suite under QEMU: every test program, one emulator process each (a process per test, as ctest
# starts them, costs a second or more of emulated start-up each: minutes over the suite), two at a time.
#
# SLOW_UNDER_EMULATION: what the runs leave out. Emulated floating-point code runs some 20-100x slower than
# native, and the whole suite takes 40 minutes here; these tests take 10 s to 3 minutes each there, and their
# code paths run natively in `make test` (the generic and NEON kernels are the same source on every
# architecture) and, in small shapes, in the tests kept here.
#  - *Tiled*: the tiled attention's finite-difference checks at T = 70 and 130 (the small-shape attention and
#    block checks stay).
#  - EveryParameterGradient/<variant>: whole-model finite-difference checks, 10-55 s each; three stay, one for
#    each block preset: seed_pre_layernorm, gpt2, qwen3_gqa.
#  - *Learnability*, *ASmallModelBeats*, *LearnsTheCopyTaskLikeFloat*: training runs of 60-300 steps.
#  - *StopSignal*, *KillDuringCheckpoint*, *KilledRuns*, *Interrupted*: signal or kill a running CLI or sweep
#    worker at a moment chosen by wall time, which the emulator's slowness moves past the point they test.
#  - CliBench.PrintsTimingMfuMemoryAndProfile, CliBench.Bf16NamesThePathAndTheRatioToFp32: assert nonzero
#    GFLOP/s columns, which round to 0.0 here.
#  - FlagSweepCli.*, HfExport.* but one, CliExport.ExportThenInspectAndProbe and .EveryFinishedRun*, RandomWalk.*: hundreds of CLI
#    starts or Monte Carlo walks (1-3 minutes each); HfExport.Gpt2MatchesOurModel stays.
#  - *TinyHessian*: a 400-parameter model's full Hessian built column by column and diagonalised (2 minutes
#    here); the curvature estimators are plain double-precision code, and HvpParity (against PyTorch's
#    autograd) and the thread-count test stay.
kept_gradients="seed_pre_layernorm gpt2 qwen3_gqa"
SLOW_UNDER_EMULATION=(
  '*Tiled*' '*Learnability*' '*ASmallModelBeats*' '*LearnsTheCopyTaskLikeFloat*'
  '*StopSignal*' '*KillDuringCheckpoint*' '*KilledRuns*' '*Interrupted*'
  'CliBench.PrintsTimingMfuMemoryAndProfile' 'CliBench.Bf16NamesThePathAndTheRatioToFp32' 'FlagSweepCli.*' 'CliExport.ExportThenInspectAndProbe' 'RandomWalk.*'
  'HfExport.Seed*' 'HfExport.Qwen3*' 'HfExport.RunWithout*' 'HfExport.Chooses*' 'HfExport.ExportsTheFinalWeights*'
  'CliExport.EveryFinishedRun*' '*TinyHessian*'
)
# the whole-model checks other than the three kept, by the names the test program lists
for variant in $(OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=3000 qemu-aarch64 "$build_dir/test_model" --gtest_list_tests |
                   sed -n 's|^  EveryParameterGradientMatchesFiniteDifferences/\([a-z0-9_]*\).*|\1|p'); do
  case " $kept_gradients " in *" $variant "*) ;; *) SLOW_UNDER_EMULATION+=("*EveryParameterGradient*/$variant") ;; esac
done
exclude=$(IFS=:; echo "${SLOW_UNDER_EMULATION[*]}")

# One CPU: every test program under qemu-aarch64 -cpu CPU (two at a time), with `filter` (gtest syntax).
# Prints one line per program that failed (with its output) and the totals.
run_programs() {
  local cpu=$1 filter=$2 logs
  logs=$(mktemp -d)
  local start=$SECONDS
  find "$build_dir" -maxdepth 1 -type f -executable -name 'test_*' -printf '%f\n' | sort | xargs -P "$jobs" -I{} sh -c \
    't0=$(date +%s); QEMU_CPU='"$cpu"' qemu-aarch64 '"$build_dir"'/{} --gtest_filter="$0" > '"$logs"'/{}.log 2>&1;
     echo $? > '"$logs"'/{}.rc; echo $(( $(date +%s) - t0 )) > '"$logs"'/{}.time' "$filter"
  local passed=0 skipped=0 failed=0 programs=0
  for rc_file in "$logs"/*.rc; do
    local program log p s f
    program=$(basename "$rc_file" .rc) log=$logs/$program.log
    programs=$((programs + 1))
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    passed=$((passed + ${p:-0})) skipped=$((skipped + ${s:-0})) failed=$((failed + ${f:-0}))
    if [ "$(cat "$rc_file")" != 0 ]; then
      status=1
      [ -n "$f" ] || failed=$((failed + 1))  # a crash: no gtest summary
      echo "test-arm64: -cpu $cpu: $program FAILED:"
      cat "$log"
    fi
  done
  echo "test-arm64: qemu-aarch64 -cpu $cpu: $programs programs, $passed passed, $skipped skipped, $failed failed" \
       "($((SECONDS - start)) s; the longest: $(for t in "$logs"/*.time; do echo "$(cat "$t") $(basename "$t" .time)"; done |
       sort -rn | head -3 | awk '{printf "%s%s %d s", (NR > 1 ? ", " : ""), $2, $1}'))"
  # the reasons of the skips, each with its count (gtest prints a reason on the line after "FILE:LINE: Skipped")
  cat "$logs"/*.log | sed -n '/: Skipped$/{n;p}' | sort | uniq -c | sed 's/^ *\([0-9]*\) /  skipped \1x: /'
  rm -rf "$logs"
}

export BLOCKLAB_TEST_CLI_LAUNCHER=qemu-aarch64  # the CLI the tests start (tests/cli_runner.h)
export BLOCKLAB_WORKER_LAUNCHER=qemu-aarch64    # the workers of sweeps, depth maps and reproduce
status=0
# -cpu max: NEON, dot product, BF16, I8MM, SVE. The suite, less SLOW_UNDER_EMULATION.
run_programs max "*-$exclude"
# -cpu cortex-a72 (Armv8.0-A, NEON only): the tests that ask the CPU what it has, and the kernels and
# training they choose: the bf16 fall back to fp32, the NEON sgemm and kernels, whole-model parity.
run_programs cortex-a72 "Bf16*:*Bf16*:OneDnn*:Isa*:*IsaLevel*:Sgemm*:*Sgemm*:CliBench.*:Kernel*:*KernelGrad*:*ReferenceParity*:Trainer.*-$exclude"
exit $status
