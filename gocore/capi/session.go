package main

/*
#include "capi_types.h"
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/mkernel/mkernel/gocore/bootstrap"
	"github.com/mkernel/mkernel/gocore/internal/sessions"
)

func sessionErr(err error) error {
	if errors.Is(err, sessions.ErrUnknownHandle) {
		return fmt.Errorf("%w: %v", errClosed, err)
	}
	return err
}

//export mk_bootstrap_listen
func mk_bootstrap_listen(host C.mk_cstr, world C.int32_t, buf *C.char, length *C.size_t) C.mk_status {
	return guard("bootstrap_listen", func() error {
		if length == nil {
			return invalid("len must not be NULL")
		}
		if world < 1 {
			return invalid("world must be >= 1, got %d", int(world))
		}
		// Check the room first: a root bound and then dropped for want of
		// buffer space would be a leak.
		const idMax = C.size_t(bootstrap.IDStringMaxLen + 1)
		if buf == nil || *length < idMax {
			*length = idMax
			return fmt.Errorf("%w: the id needs up to %d bytes", errBufferTooSmall, int(idMax))
		}
		id, err := sessions.Listen(goString(host), int(world))
		if err != nil {
			return err
		}
		return writeOut(unsafe.Pointer(buf), length, []byte(id), true)
	})
}

//export mk_session_create
func mk_session_create(cfg C.mk_cconfig, out *C.mk_session_t) C.mk_status {
	return guard("session_create", func() error {
		switch {
		case cfg == nil:
			return invalid("cfg must not be NULL")
		case out == nil:
			return invalid("out must not be NULL")
		case cfg.size < C.size_t(unsafe.Sizeof(C.mk_session_config{})) || cfg.version == 0 || cfg.version > C.MK_API_VERSION:
			return fmt.Errorf("%w: mk_session_config size %d version %d, library expects size %d and version 1..%d",
				errVersion, int(cfg.size), int(cfg.version), int(unsafe.Sizeof(C.mk_session_config{})), C.MK_API_VERSION)
		case cfg.world < 1 || cfg.rank < 0 || cfg.rank >= cfg.world:
			return invalid("rank %d of world %d", int(cfg.rank), int(cfg.world))
		case cfg.id == nil:
			return invalid("cfg.id must not be NULL (rank 0 gets it from bootstrap_listen)")
		}
		h, err := sessions.Create(goString(cfg.id), int(cfg.rank), int(cfg.world), sessions.Timeout(int64(cfg.timeout_ms)))
		if err != nil {
			return err
		}
		*out = C.mk_session_t(h)
		return nil
	})
}

//export mk_session_rank
func mk_session_rank(h C.mk_session_t, rank, world *C.int32_t) C.mk_status {
	return guard("session_rank", func() error {
		s, err := sessions.Session(uint64(h))
		if err != nil {
			return sessionErr(err)
		}
		if rank != nil {
			*rank = C.int32_t(s.Rank())
		}
		if world != nil {
			*world = C.int32_t(s.World())
		}
		return nil
	})
}

// packRecords lays out blobs as [uint64 LE length][bytes] in rank order.
func packRecords(blobs [][]byte) []byte {
	n := 0
	for _, b := range blobs {
		n += 8 + len(b)
	}
	out := make([]byte, 0, n)
	for _, b := range blobs {
		out = binary.LittleEndian.AppendUint64(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

//export mk_session_allgather
func mk_session_allgather(h C.mk_session_t, blob C.mk_cbytes, blobLen C.size_t, out unsafe.Pointer,
	outLen *C.size_t, timeoutMs C.int64_t) C.mk_status {
	return guard("session_allgather", func() error {
		if blob == nil && blobLen > 0 {
			return invalid("blob is NULL but blob_len is %d", int(blobLen))
		}
		if outLen == nil {
			return invalid("out_len must not be NULL")
		}
		var in []byte
		if blobLen > 0 {
			in = C.GoBytes(unsafe.Pointer(blob), C.int(blobLen))
		}
		res, err := sessions.AllGather(uint64(h), in, sessions.Timeout(int64(timeoutMs)))
		if err != nil {
			return sessionErr(err)
		}
		return writeOut(out, outLen, packRecords(res), false)
	})
}

//export mk_session_gathered
func mk_session_gathered(h C.mk_session_t, out unsafe.Pointer, outLen *C.size_t) C.mk_status {
	return guard("session_gathered", func() error {
		res, err := sessions.Gathered(uint64(h))
		if err != nil {
			return sessionErr(err)
		}
		return writeOut(out, outLen, packRecords(res), false)
	})
}

//export mk_session_barrier
func mk_session_barrier(h C.mk_session_t, timeoutMs C.int64_t) C.mk_status {
	return guard("session_barrier", func() error {
		return sessionErr(sessions.Barrier(uint64(h), sessions.Timeout(int64(timeoutMs))))
	})
}

//export mk_session_destroy
func mk_session_destroy(h C.mk_session_t) C.mk_status {
	return guard("session_destroy", func() error { return sessionErr(sessions.Destroy(uint64(h))) })
}
