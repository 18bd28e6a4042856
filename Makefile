# mkernel development targets. `make demo` and `make test` do all set-up on a
# fresh machine (see README.md); the other targets are steps of those two.
SHELL := /bin/bash
.DEFAULT_GOAL := build
.DELETE_ON_ERROR:

VENV     ?= .venv
PY       := $(VENV)/bin/python
PIP      := $(PY) -m pip
TORCH_VERSION ?= 2.11.0
CORE     := build/core
GOPY_OUT := build/_gopy
# Go build tags of libmkernel_core.so. `make test` builds the test variant
# (mkernel_faults: honours MKERNEL_NET_FAULTS, the host fault tests need it);
# everything else builds the production library, which refuses that variable.
export CORE_TAGS ?=
WORLD    ?= 4
NODES    ?= 2

GO_SOURCES := $(shell find gocore -name '*.go' -not -name 'zz_gopy_*' -not -name '*_test.go') \
              $(wildcard gocore/capi/*.c gocore/capi/*.h gocore/libcore/pyshim/*.h) \
              csrc/include/mkernel/core_api.h csrc/include/mkernel/fifo.h go.mod go.sum

.PHONY: build venv core install test test-go test-py cuda-check host-check sass demo launch bench clean fmt vet FORCE

# --- environment -------------------------------------------------------------
$(VENV)/.deps-stamp: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# Three attempts: a large wheel (torch's triton, ~190 MB) that stops short (seen on a nearly
	# full disk, and on flaky links) fails the whole step, and pip's own resume gives up quickly.
	for attempt in 1 2 3; do \
	  $(PIP) install -q --resume-retries 10 torch==$(TORCH_VERSION) pybindgen==0.22.1 nvidia-cutlass==4.2.0.0 \
	      pytest==9.2.0 pytest-timeout==2.4.0 numpy setuptools wheel ninja matplotlib==3.11.2 && break; \
	  [ $$attempt = 3 ] && exit 1; echo "pip install failed (attempt $$attempt), retrying"; sleep 10; \
	done
	touch $@
venv: $(VENV)/.deps-stamp

# --- Go control plane: libmkernel_core.so + the gopy bindings' sources --------
# The bundle in build/core is all a machine without Go needs (the GPU machine):
# the library, its cgo header and the generated CPython/pybindgen sources.
# gocore/libcore links the C ABI (gocore/capi) and gopy's wrappers of
# gocore/pyapi into one library: one Go runtime for the torch extension and
# the Python module.
# The tags the library was last built with: rewritten (and so newer than the
# library) only when they change, so switching between `make test` and
# `make demo` rebuilds the core and nothing else does.
$(CORE)/.build-tags: FORCE
	@mkdir -p $(CORE); echo '$(CORE_TAGS)' | cmp -s - $@ 2>/dev/null || echo '$(CORE_TAGS)' > $@
$(CORE)/libmkernel_core.so: $(GO_SOURCES) $(CORE)/.build-tags | $(VENV)/.deps-stamp
	rm -rf $(GOPY_OUT) && mkdir -p $(CORE)
	PATH=$(abspath $(VENV))/bin:$$PATH go tool gopy gen -vm=python3 -output=$(GOPY_OUT) -name=core ./gocore/pyapi
	{ echo '//go:build gopy'; echo; sed '/^#cgo /d' $(GOPY_OUT)/core.go; } > gocore/libcore/zz_gopy_core.go
	go tool goimports -w gocore/libcore/zz_gopy_core.go
	go build -tags 'gopy $(CORE_TAGS)' -buildmode=c-shared -o $@ ./gocore/libcore
	cp $(CORE)/libmkernel_core.h $(GOPY_OUT)/core_go.h
	cd $(GOPY_OUT) && $(abspath $(PY)) build.py
	cp $(GOPY_OUT)/core.c $(GOPY_OUT)/core_go.h $(GOPY_OUT)/go.py $(GOPY_OUT)/pyapi.py gocore/capi/capi_types.h $(CORE)/
	mkdir -p $(CORE)/mkernel && cp csrc/include/mkernel/core_api.h csrc/include/mkernel/fifo.h $(CORE)/mkernel/
core: $(CORE)/libmkernel_core.so

# --- Python package (torch extension + gopy module) ---------------------------
# Incremental: pip runs only when a native input changed since the last install
# (the stamp), and then ninja recompiles only the changed sources (setup.py keeps
# a fixed build directory). The Python sources need no reinstall (editable).
EXT_INPUTS := $(shell find csrc -type f) setup.py pyproject.toml
INSTALL_STAMP := $(VENV)/.mkernel-install-stamp
$(INSTALL_STAMP): $(EXT_INPUTS) $(CORE)/libmkernel_core.so $(VENV)/.deps-stamp
	$(PIP) install -q --no-build-isolation --no-deps -e .
	touch $@
install: core $(INSTALL_STAMP)
build: install

# --- CUDA compile check (no GPU needed) ----------------------------------------
# nvcc 13.0 from PyPI compiles the GEMM dispatcher and one full instantiation
# (CUTLASS collectives + the hooked kernel) for sm_90a, and fails if ptxas
# serializes wgmma (C7510): machines without a GPU still catch kernel breakage. Then it builds and
# runs one host program: the native backward mask's layout assumption (tests/cuda_check/).
CUDA_TOOLS := build/cuda-toolchain
CUDA_PKGS  := nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
              nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96
CUDA_CHECK_SOURCES := csrc/kernels/gemm/gemm_dispatch.cu \
              csrc/kernels/gemm/instantiations/gemm_coop128x128cluster2x1_bf16.cu \
              csrc/kernels/gemm/instantiations/gemm_ping64x256cluster1x1_bf16.cu \
              csrc/kernels/collectives/collectives.cu csrc/kernels/moe/moe_net.cu \
              csrc/kernels/fused/rs_copy_engine.cu \
              tests/cuda_check/net_ops_wgmma_check.cu
$(CUDA_TOOLS)/.stamp: | $(VENV)/.deps-stamp
	$(PIP) install -q --no-deps --target $(CUDA_TOOLS) $(CUDA_PKGS)
	touch $@
cuda-check: $(CUDA_TOOLS)/.stamp
	@cut=$$($(PY) -c 'import importlib.util as u, os; print(os.path.join(list(u.find_spec("cutlass_library").submodule_search_locations)[0], "source"))'); \
	T=$(CUDA_TOOLS)/nvidia/cu13; \
	for f in $(CUDA_CHECK_SOURCES); do \
	  echo "nvcc sm_90a: $$f"; \
	  $$T/bin/nvcc -std=c++17 -O1 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a \
	    --expt-relaxed-constexpr -Xptxas -v -I$$cut/include -I$$cut/tools/util/include \
	    -I$$T/include/cccl -I$$T/include -Icsrc -Icsrc/include -c $$f -o /dev/null \
	    > build/cuda-check.log 2>&1 || { cat build/cuda-check.log; exit 1; }; \
	  if grep -q C7510 build/cuda-check.log; then grep C7510 build/cuda-check.log | cut -c1-300; \
	    echo "ptxas serialized wgmma in $$f (a call in the kernel?)"; exit 1; fi; \
	done; \
	echo "nvcc + run on the host: tests/cuda_check/bwd_mask_layout_check.cu"; \
	$$T/bin/nvcc -std=c++17 -O1 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
	  -I$$cut/include -I$$cut/tools/util/include -I$$T/include/cccl -I$$T/include -Icsrc -Icsrc/include \
	  -L$$T/lib tests/cuda_check/bwd_mask_layout_check.cu -o build/bwd_mask_layout_check \
	  > build/cuda-check.log 2>&1 || { cat build/cuda-check.log; exit 1; }; \
	build/bwd_mask_layout_check

# SASS of one kernel TU without a GPU (the device build's flags: -O3, sm_90a): build/sass/<name>.sass
# (cuobjdump) and <name>.ptxas (registers, spills per kernel). For counting a kernel's loop
# instructions before a device call: `make sass SASS_SOURCE=csrc/kernels/attention/attention_variants_cross.cu`.
# cuobjdump / nvdisasm: the oldest PyPI wheels are 13.2; 13.5 reads nvcc 13.0's sm_90a cubins.
SASS_TOOLS := build/sass-tools
SASS_PKGS  := nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
$(SASS_TOOLS)/.stamp: | $(VENV)/.deps-stamp
	$(PIP) install -q --no-deps --target $(SASS_TOOLS) $(SASS_PKGS)
	chmod +x $(SASS_TOOLS)/nvidia/cu13/bin/*
	touch $@
sass: $(CUDA_TOOLS)/.stamp $(SASS_TOOLS)/.stamp
	@[ -n "$(SASS_SOURCE)" ] || { echo "make sass SASS_SOURCE=<a .cu file>"; exit 1; }
	@cut=$$($(PY) -c 'import importlib.util as u, os; print(os.path.join(list(u.find_spec("cutlass_library").submodule_search_locations)[0], "source"))'); \
	T=$(CUDA_TOOLS)/nvidia/cu13; n=$$(basename $(SASS_SOURCE) .cu); mkdir -p build/sass; \
	$$T/bin/nvcc -std=c++17 -O3 -DNDEBUG -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
	  -Xptxas -v -I$$cut/include -I$$cut/tools/util/include -I$$T/include/cccl -I$$T/include -Icsrc \
	  -Icsrc/include -c $(SASS_SOURCE) -o build/sass/$$n.o > build/sass/$$n.ptxas 2>&1 \
	  || { cat build/sass/$$n.ptxas; exit 1; }; \
	PATH=$(CURDIR)/$(SASS_TOOLS)/nvidia/cu13/bin:$$PATH cuobjdump -sass build/sass/$$n.o > build/sass/$$n.sass; \
	echo "build/sass/$$n.sass ($$(grep -c 'Function :' build/sass/$$n.sass) kernels), build/sass/$$n.ptxas"

# The CUDA build's host TUs (csrc/**/*.cpp with MKERNEL_WITH_CUDA, which the CPU build skips):
# g++ -fsyntax-only against torch's and the PyPI CUDA toolchain's headers, so that a machine
# without a GPU catches what only the device build would (all 39 files: ~3 min on 2 cores).
# `make host-check HOST_CHECK_FILES="csrc/moe_nodes.cpp"` checks the named ones only (before a
# device call); `make test` checks them all.
HOST_CHECK_FILES ?= $(wildcard csrc/*.cpp csrc/comm/*.cpp)
host-check: $(CUDA_TOOLS)/.stamp | $(VENV)/.deps-stamp
	@T=$$($(PY) -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))'); \
	I=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	N=$$($(PY) -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13", "include"))' 2>/dev/null); \
	C=$(CUDA_TOOLS)/nvidia/cu13/include; \
	printf '%s\n' $(HOST_CHECK_FILES) | xargs -P "$$(nproc)" -I{} sh -c \
	  'g++ -std=c++17 -fsyntax-only -Wno-interference-size -DMKERNEL_WITH_CUDA -I'"$$T"' -I'"$$T"'/torch/csrc/api/include \
	    -I'"$$C"' -I'"$$C"'/cccl '"$${N:+-I$$N}"' -I'"$$I"' -Icsrc -Icsrc/include {} || { echo "host-check: {} failed"; exit 255; }'
	@echo "host-check: $(words $(HOST_CHECK_FILES)) CUDA host file(s) compile (syntax)"

# --- tests --------------------------------------------------------------------
test-go:
	go vet ./...
	go test -race -count=1 ./...
	# The RDMA backends must also build and report ErrNotSupported without rdma-core headers.
	go vet -tags mkernel_nordma ./gocore/...
	go test -count=1 -tags mkernel_nordma ./gocore/transport/...
	# The test build's fault hook (MKERNEL_NET_FAULTS), which production builds refuse.
	go test -count=1 -tags mkernel_faults ./gocore/transport/
	@mkdir -p build; go test -count=1 -v $(RDMA_PKGS) 2>&1 | grep -B1 -- '--- SKIP' | grep -v '^--$$' \
	    > build/rdma-skips.txt || true
	@$(rdma_report)
# The host fault tests reorder the transports through MKERNEL_NET_FAULTS: test the
# core's test build (a later `make demo` rebuilds the production one).
test-py: export CORE_TAGS = mkernel_faults
test-py: install
	$(PY) -m pytest -q tests
test: venv test-go cuda-check host-check test-py
	@$(rdma_report)

# Skipped RDMA tests are said out loud (go test hides skips without -v): without
# rdma-core's headers the ibverbs and efa backends build as stubs, and their
# conformance tests (fake providers included) do not run; on a host without an
# RDMA NIC the real-device conformance tests do not run.
RDMA_PKGS := ./gocore/transport/ibverbs/... ./gocore/transport/efa/...
define rdma_report
n=$$(grep -c -- '--- SKIP' build/rdma-skips.txt 2>/dev/null || true); \
if [ "$${n:-0}" -gt 0 ]; then \
  echo "WARNING: $$n ibverbs/efa tests were SKIPPED (reasons in build/rdma-skips.txt)"; \
  if [ ! -f /usr/include/infiniband/verbs.h ] || [ ! -f /usr/include/infiniband/efadv.h ]; then \
    echo "WARNING: no rdma-core headers: the ibverbs/efa backends were built as stubs and their"; \
    echo "WARNING: conformance tests did not run; install libibverbs-dev (as .ci/run does), then"; \
    echo "WARNING: go clean -cache (Go's build cache does not notice new system headers)"; \
  fi; \
fi
endef

# --- the main job: the ops across $(WORLD) local processes ---------------------
# --require-all: an op skipped as not built for a backend (CPU rows always; CUDA rows where a
# GPU is) fails the demo.
demo: install
	$(PY) -m mkernel demo --world $(WORLD) --nodes $(NODES) --require-all

# A script as $(WORLD) local ranks in $(NODES) emulated nodes (MPS=1: share the GPU through MPS):
#   make launch SCRIPT=examples/x.py ARGS="--steps 10" WORLD=4 NODES=2 MPS=1
SCRIPT ?= -m mkernel.demo --worker
launch: install
	$(PY) -m mkernel launch --world $(WORLD) --nodes $(NODES) $(if $(filter 1,$(MPS)),--mps) $(SCRIPT) $(ARGS)

# Every benchmarks/bench_*.py on the GPU (none without one: it says so and exits 0), then a
# markdown table and a PNG plot beside each JSON it wrote (benchmarks/report.py).
bench: install
	$(PY) benchmarks/run.py

fmt:
	gofmt -w gocore
vet:
	go vet ./...

clean:
	rm -rf build dist python/mkernel.egg-info gocore/libcore/zz_gopy_*.go $(INSTALL_STAMP)
	find python -name '*.so' -delete
