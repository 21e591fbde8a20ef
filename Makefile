# blocklab: top-level entry points. `make demo` and `make test` install missing Debian packages,
# build in Release, then run the demo / the test suite.
BUILD_DIR ?= build
SANITIZE_DIR ?= build-asan
CLANG_DIR ?= build-clang
ARM64_DIR ?= build-arm64
WEB_DIR ?= build-web
PORTABLE_DIR ?= build-portable
PORTABLE_ARM64 ?= 0
JOBS ?= $(shell nproc)
FUZZ_SECONDS ?= 20
# Left out of the sanitizer pass: long numeric loops whose code paths faster tests already run there. The
# whole-model finite-difference checks repeat one forward and backward hundreds of times per variant; the same
# variants' ThreadCountDoesNotChangeResults and SecondForwardDoesNotDisturbAPendingBackward run those paths once
# each under the sanitizers. TinyHessian builds a Hessian column by column (the Curvature tests run its code).
SANITIZE_SKIP ?= KernelGrad.CausalAttentionTiled|Learnability.SmallModelLearnsTheCopyTask|WholeModel.EveryParameterGradientMatchesFiniteDifferences|TinyHessian.EstimatorsAgree

.PHONY: all deps build test test-python wheel sdist wheel-portable test-wheels test-isa test-arm64 web web-serve test-web test-sanitize test-clang fuzz-smoke check-docs demo bench clean

all: build

deps:
	@./tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release > /dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	@JOBS=$(JOBS) ./tools/python-tests.sh $(BUILD_DIR)

# The Python package (python/): built with `pip install .` into $(BUILD_DIR)/venv, tested with pytest, the
# notebooks in docs/notebooks executed, the wheel of `make wheel` installed and run in a new virtual
# environment outside the tree. Part of `make test`.
test-python: build
	@JOBS=$(JOBS) ./tools/python-tests.sh $(BUILD_DIR)

# A self-contained wheel of the package and the CLI in $(BUILD_DIR)/wheelhouse (tools/build-wheel.sh): linked
# from the core already compiled in $(BUILD_DIR), its shared libraries bundled by auditwheel.
wheel: build
	@JOBS=$(JOBS) ./tools/build-wheel.sh $(BUILD_DIR)

# The sdist in $(BUILD_DIR)/sdist (tools/build-sdist.sh), carrying the header-only libraries (third_party/,
# tools/vendor-headers.sh): `pip install` of it needs a C++20 compiler with OpenMP and nothing else installed.
sdist: deps
	@./tools/build-sdist.sh $(BUILD_DIR)

# Wheels for any x86-64 Linux with glibc 2.31 or newer (manylinux_2_31: Colab, Debian 11, Ubuntu 20.04 and
# later) in PORTABLE_DIR/wheelhouse: cp39, cp311 and cp312-abi3 (3.12 and later), built from the sdist in a
# Debian 11 root made by debootstrap (kept in PORTABLE_DIR/roots), without OpenBLAS, oneDNN and MPI; with
# PORTABLE_ARM64=1 the same three for aarch64 too (cross-compiled there). See tools/build-wheel-portable.sh
# and docs/python.md. Needs root (chroot) and Debian's archive and PyPI.
wheel-portable:
	@JOBS=$(JOBS) PORTABLE_ARM64=$(PORTABLE_ARM64) ./tools/build-wheel-portable.sh $(PORTABLE_DIR)

# Those wheels installed into a fresh virtual environment in Debian 11 (glibc 2.31, Python 3.9), 12 (3.11) and
# 13 (3.13) roots, none with a compiler: the CLI trains, samples and exports, the Python API trains; the
# aarch64 cp39 wheel, where built, under qemu-aarch64 with an arm64 Debian 11 root's glibc and Python
# (tools/test-wheels.sh). Minutes, and roots to download: not part of `make test` or CI.
test-wheels:
	@./tools/test-wheels.sh $(PORTABLE_DIR)

# The test suite at each kernel ISA level below this CPU's (BLOCKLAB_ISA=avx2, then generic), and the kernel,
# model and CLI tests on an emulated AVX2-only CPU (qemu-x86_64 -cpu Haswell, installed where missing); see
# tools/test-isa.sh.
test-isa: build
	@JOBS=$(JOBS) ./tools/test-isa.sh $(BUILD_DIR)

# blocklab cross-compiled for 64-bit ARM (cmake/aarch64-linux-gnu.cmake, Debian's g++-aarch64-linux-gnu and
# arm64 libraries, installed where missing) in ARM64_DIR, its tests run under qemu-aarch64 as a CPU with
# BF16 and SVE (-cpu max) and as one without (-cpu cortex-a72); see tools/test-arm64.sh.
test-arm64:
	@JOBS=$(JOBS) ./tools/test-arm64.sh $(ARM64_DIR)

# The browser page (docs/web.md): the core compiled for WebAssembly (wasm32 with SIMD128, one thread; Debian's
# emscripten, nodejs, chromium and libjs-chart.js, installed where missing) in WEB_DIR, the static site in
# WEB_DIR/dist; web-serve serves it on 127.0.0.1:8000. test-web runs the kernel and model tests under Node, then
# drives the page in headless Chromium and compares its numbers with the native CLI's; see tools/web.sh.
web:
	@JOBS=$(JOBS) WEB_DIR=$(WEB_DIR) ./tools/web.sh build

web-serve:
	@WEB_DIR=$(WEB_DIR) ./tools/web.sh serve

test-web: build
	@JOBS=$(JOBS) WEB_DIR=$(WEB_DIR) ./tools/web.sh test $(BUILD_DIR)/blocklab

# The test suite built with clang++ under AddressSanitizer + UndefinedBehaviorSanitizer
# (-fno-sanitize-recover=all), at -O1 with line tables, without the benchmarks and the tests matching
# SANITIZE_SKIP. Built with clang, so that this one pass also keeps the tree building and passing with the
# second compiler (CI runs it instead of test-clang; SANITIZE_CXX=g++ builds it with GCC's sanitizers). It
# leaves OpenBLAS out, so that the suite also runs on the portable GEMM (kernels/gemm.h) as a wasm build does.
SANITIZE_CXX ?= clang++
test-sanitize: deps
	@CXX=$(SANITIZE_CXX) cmake -S . -B $(SANITIZE_DIR) -DBLOCKLAB_SANITIZE=ON -DBLOCKLAB_OPENBLAS=OFF \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=ON > /dev/null
	@cmake --build $(SANITIZE_DIR) -j $(JOBS)
	@cd $(SANITIZE_DIR) && ctest --output-on-failure -j $(JOBS) -E '$(SANITIZE_SKIP)'

# The test suite built with clang++ (Release) in CLANG_DIR: clang's optimised build, which CI leaves to
# test-sanitize's clang build at -O1.
test-clang: deps
	@CXX=clang++ cmake -S . -B $(CLANG_DIR) -DCMAKE_BUILD_TYPE=Release > /dev/null
	@cmake --build $(CLANG_DIR) -j $(JOBS)
	@cd $(CLANG_DIR) && ctest --output-on-failure -j $(JOBS)

# Each libFuzzer target (safetensors, TOML config) for FUZZ_SECONDS, with ASan + UBSan; see fuzz/run-smoke.sh.
fuzz-smoke:
	@./fuzz/run-smoke.sh $(FUZZ_SECONDS)

# The quick reproduction of the source section: every experiment, figures, runs/reproduce-quick/report.{md,html}.
# Running it again continues in the same directory (finished training runs are kept).
# The docs against the built CLI: links, flags, and the README tour's commands run as written (tools/check-docs.sh).
check-docs: build
	@./tools/check-docs.sh $(BUILD_DIR)

demo: build
	@$(BUILD_DIR)/blocklab reproduce --quick --out runs/reproduce-quick

bench: build
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target bench_gemm

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR) $(CLANG_DIR) $(ARM64_DIR) $(WEB_DIR)
