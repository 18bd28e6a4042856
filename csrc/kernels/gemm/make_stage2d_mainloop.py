"""Generates sm90_mma_stage2d.hpp from CUTLASS's sm90_mma_tma_gmma_ss_warpspecialized.hpp (gemm15).

    python csrc/kernels/gemm/make_stage2d_mainloop.py \
        <cutlass>/include/cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp \
        csrc/kernels/gemm/sm90_mma_stage2d.hpp

The copy is CUTLASS's collective mainloop registered for mkernel::gemm_swap::MainloopSm90Stage2D
(so SwapConfig<..., Stage2D = true> picks it), with each TMA descriptor built from one stage's
2-D smem layout instead of a static slice of the 3-D layout (which CuTe cannot slice at an odd
number of 8-row swizzle atoms: 168 tokens). Every substitution must match (asserted), so a
CUTLASS whose file changed shape fails here rather than generating something else.
"""
import re
import sys

src=open(sys.argv[1]).read()
hdr='''// GENERATED from CUTLASS 4.2's cutlass/gemm/collective/sm90_mma_tma_gmma_ss_warpspecialized.hpp by
// csrc/kernels/gemm/make_stage2d_mainloop.py (gemm15): the same collective mainloop
// (TMA + GMMA, warp-specialized), registered for the dispatch policy
// mkernel::gemm_swap::MainloopSm90Stage2D, with ONE change: the TMA descriptors are built from a
// single stage's 2-D smem layout (tile_to_shape of the atom to (rows, K)) instead of slicing the
// 3-D (rows, K, stages) layout at stage 0. CuTe's static slice of a swizzled layout
// (swizzle_layout.hpp slice_and_offset) composes the swizzle's projection with the stage mode and
// the row-atom mode, and fails "Stride/Shape Divisibility" when a tile has an odd number of 8-row
// atoms (168 tokens = 21 atoms, stage stride 10752 elements); the hardware only needs each stage
// 1024-byte aligned (21 x 1024 B: it is). And the policy's optional TMA cache hints (Hints = 1:
// A evict-first, B evict-last; CUTLASS passes none). Everything else is CUTLASS's code, unchanged.
'''
n=0
def sub(pat, rep, count=0):
    global src, n
    new, k = re.subn(pat, rep, src, count=count)
    assert k>0, pat
    n+=k; src=new
# policy
sub(r'MainloopSm90TmaGmmaWarpSpecialized<Stages, ClusterShape, KernelSchedule>', 'mkernel::gemm_swap::MainloopSm90Stage2D<Stages, ClusterShape, KernelSchedule, Hints>')
sub(r'(template <\n  int Stages,\n  class ClusterShape,\n  class KernelSchedule,\n)', r'\1  int Hints,\n', count=1)
# the TMA loads take the policy's cache hints (a prvalue: with() binds a const&, and a reference to
# the static member would odr-use it in device code)
sub(r'tma_load_a\.with\(\*tma_barrier, mcast_mask_a\)', 'tma_load_a.with(*tma_barrier, mcast_mask_a, cute::TMA::CacheHintSm90(DispatchPolicy::kHintA))')
sub(r'tma_load_b\.with\(\*tma_barrier, mcast_mask_b\)', 'tma_load_b.with(*tma_barrier, mcast_mask_b, cute::TMA::CacheHintSm90(DispatchPolicy::kHintB))')
# the 2-D layouts after SmemLayoutB's definition
anchor='      cute::conditional_t< ::cutlass::gemm::detail::is_major<0,StrideB>(), Step<_2,_1,_3>, Step<_1,_2,_3>>{}));\n'
assert src.count(anchor)==1
src=src.replace(anchor, anchor+'''  // gemm15: one stage's layout, built 2-D (no static slice of the swizzled 3-D layout)
  using SmemLayoutA2D = decltype(tile_to_shape(
      SmemLayoutAtomA{},
      make_shape(shape<0>(TileShape{}), shape<2>(TileShape{})),
      cute::conditional_t< ::cutlass::gemm::detail::is_major<0,StrideA>(), Step<_2,_1>, Step<_1,_2>>{}));
  using SmemLayoutB2D = decltype(tile_to_shape(
      SmemLayoutAtomB{},
      make_shape(shape<1>(TileShape{}), shape<2>(TileShape{})),
      cute::conditional_t< ::cutlass::gemm::detail::is_major<0,StrideB>(), Step<_2,_1>, Step<_1,_2>>{}));
''')
sub(r'SmemLayoutA\{\}\(_,_,cute::Int<0>\{\}\)', 'SmemLayoutA2D{}')
sub(r'SmemLayoutB\{\}\(_,_,cute::Int<0>\{\}\)', 'SmemLayoutB2D{}')
# prepend policy definition after the includes
inc='namespace cutlass::gemm::collective {\nusing namespace cute;\n'
assert src.count(inc)==1
src=src.replace(inc, '''namespace mkernel::gemm_swap {
// CUTLASS's MainloopSm90TmaGmmaWarpSpecialized under another name (its members inherited), so
// that the collective below is picked instead of CUTLASS's.
// Hints = 1 (gemm15): the TMA loads of A (the swapped GEMM's weights, streamed once) evict-first and
// of B (its tokens, re-read by every weight block) evict-last; 0: CUTLASS's (evict-normal).
template <int Stages_, class ClusterShape_, class KernelSchedule, int Hints = 0>
struct MainloopSm90Stage2D
    : cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<Stages_, ClusterShape_, KernelSchedule> {
  static constexpr cute::TMA::CacheHintSm90 kHintA =
      Hints ? cute::TMA::CacheHintSm90::EVICT_FIRST : cute::TMA::CacheHintSm90::EVICT_NORMAL;
  static constexpr cute::TMA::CacheHintSm90 kHintB =
      Hints ? cute::TMA::CacheHintSm90::EVICT_LAST : cute::TMA::CacheHintSm90::EVICT_NORMAL;
};
}  // namespace mkernel::gemm_swap

'''+inc)
# keep CUTLASS's license header; put ours after the pragma once
src=src.replace('#pragma once\n', '#pragma once\n'+hdr, 1)
open(sys.argv[2],'w').write(src)
print("substitutions", n)
