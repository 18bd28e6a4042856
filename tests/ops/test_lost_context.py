"""How errors after group ops are reported (mkernel.ops._wait_failure_error): a CUDA error
means the context is lost (a trapped wait here or in another MPS client) and becomes an
MkernelError saying so; mkernel's own refusals that merely mention CUDA (the capture-time
"cannot grow during CUDA-graph capture: call ctx.reserve(...)", the ring's multi-node refusal)
pass through unchanged. No GPU needed: the wait record is stubbed."""

from __future__ import annotations

import pytest

from mkernel import ops
from mkernel.runtime import MkernelError


@pytest.fixture
def after_group_ops(monkeypatch):
    monkeypatch.setattr(ops, "_launched_group_op", True)
    monkeypatch.setattr(ops, "last_wait_failure", lambda: None)


@pytest.mark.parametrize("msg", [
    "mkernel.all_reduce: this call needs inter-node areas of 1 (send) and 2 (receive) bytes per "
    "rank, more than group 1 holds, and they cannot grow during CUDA-graph capture: call "
    "ctx.reserve(nbytes) (Context.reserve)",
    "mkernel.ring_attention: the group spans 2 (emulated) nodes; the CUDA ring moves K/V through "
    "intra-node peer memory only",
])
def test_a_refusal_that_mentions_cuda_passes_through(after_group_ops, msg):
    assert ops._wait_failure_error(RuntimeError(msg)) is None


@pytest.mark.parametrize("msg", ["CUDA error: unspecified launch failure",
                                 "mkernel.all_reduce: launch failed: unspecified launch failure"])
def test_a_cuda_error_after_group_ops_is_a_lost_context(after_group_ops, msg):
    err = ops._wait_failure_error(RuntimeError(msg))
    assert isinstance(err, MkernelError) and "context was lost" in str(err), err


def test_the_wait_record_names_the_peer(monkeypatch):
    monkeypatch.setattr(ops, "last_wait_failure", lambda: "rank 0 ... from peer rank 3")
    err = ops._wait_failure_error(RuntimeError("CUDA error: unspecified launch failure"))
    assert isinstance(err, MkernelError) and "peer rank 3" in str(err)
