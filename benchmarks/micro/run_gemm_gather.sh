#!/usr/bin/env bash
# Builds benchmarks/micro/gemm_gather.cu for the packed grouped GEMM's configs in parallel on the GPU
# machine and runs each on the seed shape's per-rank grouped GEMM (128 experts x 256 rows, N 2048, K 7168)
# with every SM and with half of them (a rank's MPS share at W=2). Logs to $OUT/gemm_gather.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp}
whl=$(ls .whl/nvidia_cutlass-4.2.0.0-*.whl | head -1)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/mkernel-site "$whl"
C=/tmp/mkernel-site/cutlass_library/source
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
# the packable configs (gemm_sm90.cuh kPackable)
VARIANTS=${VARIANTS:-"kCoop128x256Cluster2x1 kCoop128x256Cluster1x2 kCoop128x128Cluster2x1 kCoop256x128Cluster1x2 kPing128x128Cluster1x2"}
log=$OUT/gemm_gather.log
: >"$log"
s=$(date +%s)
for v in $VARIANTS; do
  cfg=$v
  $NVCC -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Icsrc -Icsrc/include \
    -I$C/include -I$C/tools/util/include -DCFG=$cfg benchmarks/micro/gemm_gather.cu \
    -o /tmp/gg_$cfg -lcuda >/tmp/gg_$cfg.build 2>&1 &
done
wait
echo "built in $(( $(date +%s) - s )) s" >>"$log"
for v in $VARIANTS; do
  cfg=$v
  [ -x /tmp/gg_$cfg ] || { echo "BUILD FAILED $v"; grep -i error /tmp/gg_$cfg.build | head; } >>"$log"
  for args in "128 256 2048 7168 0" "128 256 2048 7168 66" "128 256 2048 7168 0 seq"; do
    timeout 60 /tmp/gg_$cfg $args >>"$log" 2>&1 || echo "rc=$? $v $args" >>"$log"
  done
done
cat "$log"
