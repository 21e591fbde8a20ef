# blocklab: top-level entry points. `make demo` and `make test` install missing Debian packages,
# build in Release, then run the demo / the test suite.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps build test demo bench clean

all: build

deps:
	@./tools/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release > /dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

demo: build
	@$(BUILD_DIR)/blocklab train --task copy --norm-placement pre --layers 2 --width 32 --heads 2 \
		--vocab 8 --copy-len 8 --batch 16 --steps 300 --lr 3e-3 --out runs/demo

bench: build
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target bench_gemm

clean:
	rm -rf $(BUILD_DIR)
