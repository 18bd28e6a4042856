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
WORLD    ?= 4
NODES    ?= 2

GO_SOURCES := $(shell find gocore -name '*.go' -not -name 'zz_gopy_*' -not -name '*_test.go') \
              $(wildcard gocore/capi/*.c gocore/capi/*.h gocore/capi/pyshim/*.h) \
              csrc/include/mkernel/core_api.h csrc/include/mkernel/fifo.h go.mod go.sum

.PHONY: build venv core install test test-go test-py cuda-check demo launch bench clean fmt vet

# --- environment -------------------------------------------------------------
$(VENV)/.deps-stamp: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==$(TORCH_VERSION) pybindgen==0.22.1 nvidia-cutlass==4.2.0.0 pytest==9.2.0 pytest-timeout==2.4.0 \
	    numpy setuptools wheel ninja matplotlib==3.11.2
	touch $@
venv: $(VENV)/.deps-stamp

# --- Go control plane: libmkernel_core.so + the gopy bindings' sources --------
# The bundle in build/core is all a machine without Go needs (the GPU machine):
# the library, its cgo header and the generated CPython/pybindgen sources.
$(CORE)/libmkernel_core.so: $(GO_SOURCES) | $(VENV)/.deps-stamp
	rm -rf $(GOPY_OUT) && mkdir -p $(CORE)
	PATH=$(abspath $(VENV))/bin:$$PATH go tool gopy gen -vm=python3 -output=$(GOPY_OUT) -name=core ./gocore/pyapi
	{ echo '//go:build gopy'; echo; sed '/^#cgo /d' $(GOPY_OUT)/core.go; } > gocore/capi/zz_gopy_core.go
	go tool goimports -w gocore/capi/zz_gopy_core.go
	go build -tags gopy -buildmode=c-shared -o $@ ./gocore/capi
	cp $(CORE)/libmkernel_core.h $(GOPY_OUT)/core_go.h
	cd $(GOPY_OUT) && $(abspath $(PY)) build.py
	cp $(GOPY_OUT)/core.c $(GOPY_OUT)/core_go.h $(GOPY_OUT)/go.py $(GOPY_OUT)/pyapi.py gocore/capi/capi_types.h $(CORE)/
	mkdir -p $(CORE)/mkernel && cp csrc/include/mkernel/core_api.h csrc/include/mkernel/fifo.h $(CORE)/mkernel/
core: $(CORE)/libmkernel_core.so

# --- Python package (torch extension + gopy module) ---------------------------
install: core
	$(PIP) install -q --no-build-isolation --no-deps -e .
build: install

# --- CUDA compile check (no GPU needed) ----------------------------------------
# nvcc 13.0 from PyPI compiles the GEMM dispatcher and one full instantiation
# (CUTLASS collectives + the hooked kernel) for sm_90a, and fails if ptxas
# serializes wgmma (C7510): machines without a GPU still catch kernel breakage.
CUDA_TOOLS := build/cuda-toolchain
CUDA_PKGS  := nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
              nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96
CUDA_CHECK_SOURCES := csrc/kernels/gemm/gemm_dispatch.cu \
              csrc/kernels/gemm/instantiations/gemm_coop128x128cluster2x1_bf16.cu \
              csrc/kernels/gemm/instantiations/gemm_ping64x256cluster1x1_bf16.cu \
              csrc/kernels/collectives/collectives.cu \
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
	done

# --- tests --------------------------------------------------------------------
test-go:
	go vet ./...
	go test -race -count=1 ./...
	# The RDMA backends must also build and report ErrNotSupported without rdma-core headers.
	go vet -tags mkernel_nordma ./gocore/...
	go test -count=1 -tags mkernel_nordma ./gocore/transport/...
test-py: install
	$(PY) -m pytest -q tests
test: venv test-go cuda-check test-py

# --- the main job: the ops across $(WORLD) local processes ---------------------
demo: install
	$(PY) -m mkernel demo --world $(WORLD) --nodes $(NODES)

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
	rm -rf build dist python/mkernel.egg-info gocore/capi/zz_gopy_*.go
	find python -name '*.so' -delete
