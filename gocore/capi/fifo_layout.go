package capi

/*
#cgo CFLAGS: -I${SRCDIR}/../../csrc/include
#include <stddef.h>
#include "mkernel/fifo.h"

// The C compiler's view of fifo.h, in the order of fifo.Layout().
static const size_t mk_fifo_layout_c[] = {
    sizeof(mk_fifo_cmd),
    offsetof(mk_fifo_cmd, seq), offsetof(mk_fifo_cmd, kind), offsetof(mk_fifo_cmd, flags),
    offsetof(mk_fifo_cmd, peer), offsetof(mk_fifo_cmd, arrival_slot), offsetof(mk_fifo_cmd, local_buf),
    offsetof(mk_fifo_cmd, remote_buf), offsetof(mk_fifo_cmd, local_off), offsetof(mk_fifo_cmd, remote_off),
    offsetof(mk_fifo_cmd, bytes), offsetof(mk_fifo_cmd, arrival_seq), offsetof(mk_fifo_cmd, enqueue_ns),
    sizeof(mk_fifo_ctrl),
    offsetof(mk_fifo_ctrl, magic), offsetof(mk_fifo_ctrl, version), offsetof(mk_fifo_ctrl, cmd_bytes),
    offsetof(mk_fifo_ctrl, capacity), offsetof(mk_fifo_ctrl, clock), offsetof(mk_fifo_ctrl, head),
    offsetof(mk_fifo_ctrl, tail), offsetof(mk_fifo_ctrl, done), offsetof(mk_fifo_ctrl, error),
    offsetof(mk_fifo_ctrl, error_peer), offsetof(mk_fifo_ctrl, error_ticket), offsetof(mk_fifo_ctrl, error_state),
    MK_FIFO_MAGIC, MK_FIFO_VERSION, MK_FIFO_PEER_ALL,
    MK_FIFO_WRITE, MK_FIFO_WRITE_SIGNAL, MK_FIFO_FENCE, MK_FIFO_BARRIER,
    MK_FIFO_CLOCK_MONOTONIC, MK_FIFO_CLOCK_GLOBALTIMER,
    MK_FIFO_ERR_PRODUCER, MK_FIFO_ERR_PROXY, MK_FIFO_ERR_CLOSED,
    MK_FIFO_MAX_CAPACITY,
    MK_FIFO_ERROR_FREE, MK_FIFO_ERROR_CLAIMED, MK_FIFO_ERROR_SET,
    offsetof(mk_fifo_ctrl, format), sizeof(mk_fifo_ll_entry), MK_FIFO_LL_WORDS, MK_FIFO_FORMAT_LL,
};
static size_t mk_fifo_layout_len(void) { return sizeof(mk_fifo_layout_c) / sizeof(mk_fifo_layout_c[0]); }
static size_t mk_fifo_layout_at(size_t i) { return mk_fifo_layout_c[i]; }

// A C producer pushing into memory Go initialised: the protocols agree, not just the offsets.
static int mk_fifo_push_from_c(void* mem, uint16_t peer, uint64_t bytes, uint64_t* ticket) {
  mk_fifo_cmd cmd = {0};
  cmd.kind = MK_FIFO_WRITE_SIGNAL;
  cmd.peer = peer;
  cmd.bytes = bytes;
  cmd.arrival_slot = 7;
  cmd.arrival_seq = 42;
  cmd.enqueue_ns = mk_fifo_now_ns();
  return mk_fifo_push((mk_fifo_ctrl*)mem, &cmd, 1000000000ull, ticket);
}

// mk_fifo_fail from C, reading the record back as C sees it.
static int mk_fifo_fail_from_c(void* mem, uint32_t code, uint32_t peer, uint64_t ticket) {
  return mk_fifo_fail((mk_fifo_ctrl*)mem, code, peer, ticket);
}
*/
import "C"

import "unsafe"

// fifoLayoutC returns the C compiler's sizes, offsets and constants of fifo.h in the
// order of fifo.Layout (tests cannot use cgo themselves).
func fifoLayoutC() []uintptr {
	n := int(C.mk_fifo_layout_len())
	out := make([]uintptr, n)
	for i := range out {
		out[i] = uintptr(C.mk_fifo_layout_at(C.size_t(i)))
	}
	return out
}

// fifoPushFromC pushes one WRITE_SIGNAL command with the C host producer.
func fifoPushFromC(mem []byte, peer uint16, bytes uint64) (ticket uint64, rc int) {
	var t C.uint64_t
	rc = int(C.mk_fifo_push_from_c(unsafe.Pointer(&mem[0]), C.uint16_t(peer), C.uint64_t(bytes), &t))
	return uint64(t), rc
}

// fifoFailFromC calls the C mk_fifo_fail on a FIFO; it reports whether C's record won.
func fifoFailFromC(mem []byte, code, peer uint32, ticket uint64) bool {
	return C.mk_fifo_fail_from_c(unsafe.Pointer(&mem[0]), C.uint32_t(code), C.uint32_t(peer), C.uint64_t(ticket)) != 0
}
