package capi

/*
#include "capi_types.h"

// Calls through the caller's device copier (cgo cannot call a C function pointer itself).
typedef int32_t (*mk_capi_copy_start_fn)(void*, int32_t, uint32_t, uint64_t, uint32_t, uint64_t, uint64_t, uint64_t*);
typedef int32_t (*mk_capi_copy_done_fn)(void*, uint64_t, int32_t*);
static inline int32_t mk_capi_call_start(mk_capi_copy_start_fn f, void* ctx, int32_t peer, uint32_t lb, uint64_t lo,
                                         uint32_t rb, uint64_t ro, uint64_t n, uint64_t* tok) {
  return f(ctx, peer, lb, lo, rb, ro, n, tok);
}
static inline int32_t mk_capi_call_done(mk_capi_copy_done_fn f, void* ctx, uint64_t tok, int32_t* done) {
  return f(ctx, tok, done);
}
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/mkernel/mkernel/gocore/datapath"
	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/internal/sessions"
	"github.com/mkernel/mkernel/gocore/proxy"
	"github.com/mkernel/mkernel/gocore/transport"
)

// transportStatus maps the data path's errors onto status codes (statusOf's tail).
func transportStatus(err error) C.mk_status {
	switch {
	case errors.Is(err, sessions.ErrUnknownDatapath), errors.Is(err, transport.ErrClosed), errors.Is(err, proxy.ErrClosed):
		return C.MK_ERR_CLOSED
	case errors.Is(err, transport.ErrTimeout):
		return C.MK_ERR_TIMEOUT
	case errors.Is(err, transport.ErrPeerGone):
		return C.MK_ERR_REMOTE
	case errors.Is(err, transport.ErrAuth):
		return C.MK_ERR_AUTH
	case errors.Is(err, transport.ErrInvalid), errors.Is(err, proxy.ErrBadCommand):
		return C.MK_ERR_INVALID_ARGUMENT
	case errors.Is(err, transport.ErrNotSupported):
		return C.MK_ERR_NOT_SUPPORTED
	}
	return C.MK_ERR_SYSTEM
}

func datapathErr(err error) error {
	if errors.Is(err, sessions.ErrUnknownDatapath) {
		return fmt.Errorf("%w: %v", errClosed, err)
	}
	return err
}

// Sizes of the v1, v2 and v3 layouts of mk_datapath_config: a v1 caller's struct ends
// before the v2 tail (fifo_clock, num_device_buffers, device_buffers), a v2 caller's before
// the v3 tail (the device copier).
var (
	datapathConfigV1Size = C.size_t(unsafe.Offsetof(C.mk_datapath_config{}.fifo_clock))
	datapathConfigV2Size = C.size_t(unsafe.Offsetof(C.mk_datapath_config{}.device_copy_start))
	datapathConfigV3Size = C.size_t(unsafe.Sizeof(C.mk_datapath_config{}))
)

// cCopier is the caller's device copier (mk_datapath_config v3 tail) as a
// transport.DeviceCopier. The function pointers and ctx are C memory, kept as given.
type cCopier struct {
	start C.mk_capi_copy_start_fn
	done  C.mk_capi_copy_done_fn
	ctx   unsafe.Pointer
}

func (c *cCopier) Start(peer int, local transport.BufferID, localOff uint64, remote transport.BufferID, remoteOff, n uint64) (uint64, error) {
	var tok C.uint64_t
	if rc := C.mk_capi_call_start(c.start, c.ctx, C.int32_t(peer), C.uint32_t(local), C.uint64_t(localOff),
		C.uint32_t(remote), C.uint64_t(remoteOff), C.uint64_t(n), &tok); rc != 0 {
		return 0, fmt.Errorf("the extension's device_copy_start failed (error %d; a cudaError_t)", int32(rc))
	}
	return uint64(tok), nil
}

func (c *cCopier) Done(token uint64) (bool, error) {
	var done C.int32_t
	if rc := C.mk_capi_call_done(c.done, c.ctx, C.uint64_t(token), &done); rc != 0 {
		return false, fmt.Errorf("the extension's device_copy_done failed (error %d; a cudaError_t)", int32(rc))
	}
	return done != 0, nil
}

// datapathConfig converts the C configuration.
func datapathConfig(cfg C.mk_cdpconfig, world int) (datapath.Config, error) {
	var out datapath.Config
	switch {
	case cfg == nil:
		return out, invalid("cfg must not be NULL")
	case cfg.size < datapathConfigV1Size || cfg.version == 0 || cfg.version > C.MK_API_VERSION:
		return out, fmt.Errorf("%w: mk_datapath_config size %d version %d, library expects size >= %d and version 1..%d",
			errVersion, int(cfg.size), int(cfg.version), int(datapathConfigV1Size), C.MK_API_VERSION)
	case cfg.num_buffers > 0 && (cfg.buffer_ids == nil || cfg.buffer_bytes == nil):
		return out, invalid("num_buffers is %d but buffer_ids or buffer_bytes is NULL", int(cfg.num_buffers))
	case cfg.num_buffers > 4096:
		return out, invalid("%d buffers (at most 4096)", int(cfg.num_buffers))
	}
	n := int(cfg.num_buffers)
	if n > 0 {
		ids := unsafe.Slice((*C.uint32_t)(unsafe.Pointer(cfg.buffer_ids)), n)
		sizes := unsafe.Slice((*C.uint64_t)(unsafe.Pointer(cfg.buffer_bytes)), n)
		for i := range n {
			if sizes[i] == 0 || sizes[i] > 1<<40 {
				return out, invalid("buffer %d: %d bytes", int(ids[i]), uint64(sizes[i]))
			}
			out.Buffers = append(out.Buffers, datapath.Buffer{ID: transport.BufferID(ids[i]), Bytes: int(sizes[i])})
		}
	}
	if cfg.node != nil {
		nodes := unsafe.Slice((*C.int32_t)(unsafe.Pointer(cfg.node)), world)
		for _, v := range nodes {
			out.Node = append(out.Node, int(v))
		}
	}
	out.FlagSlots, out.FIFOSlots = int(cfg.flag_slots), int(cfg.fifo_slots)
	out.AllPeers = cfg.all_peers != 0
	out.Net = transport.Selection{Name: goString(C.mk_cstr(unsafe.Pointer(cfg.net)))}
	if cfg.timeout_ms > 0 {
		out.Timeout = time.Duration(cfg.timeout_ms) * time.Millisecond
	}
	// The v2 tail, when the caller's struct has it.
	if cfg.size >= datapathConfigV2Size {
		out.Clock = fifo.Clock(cfg.fifo_clock)
		if out.Clock > fifo.ClockGlobaltimer {
			return out, invalid("fifo_clock %d is not an mk_fifo_clock", uint32(cfg.fifo_clock))
		}
		nd := int(cfg.num_device_buffers)
		switch {
		case nd > 0 && cfg.device_buffers == nil:
			return out, invalid("num_device_buffers is %d but device_buffers is NULL", nd)
		case nd > 4096:
			return out, invalid("%d device buffers (at most 4096)", nd)
		}
		if nd > 0 {
			for _, d := range unsafe.Slice((*C.mk_device_buffer)(unsafe.Pointer(cfg.device_buffers)), nd) {
				if d.ptr == 0 || d.bytes == 0 || d.bytes > 1<<40 || d.gpu < 0 {
					return out, invalid("device buffer %d: %d bytes at %#x on GPU %d", uint32(d.id), uint64(d.bytes), uint64(d.ptr), int(d.gpu))
				}
				out.Device = append(out.Device, datapath.DeviceBuffer{ID: transport.BufferID(d.id), Region: transport.DeviceRegion{
					GPU: int(d.gpu), Ptr: uintptr(d.ptr), Len: uint64(d.bytes), DMABufFD: int(d.dmabuf_fd), DMABufOffset: uint64(d.dmabuf_offset)}})
			}
		}
	}
	// The v3 tail: the device copier (both functions or neither).
	if cfg.size >= datapathConfigV3Size && cfg.version >= 3 {
		switch {
		case cfg.device_copy_start != nil && cfg.device_copy_done != nil:
			out.DeviceCopy = &cCopier{start: C.mk_capi_copy_start_fn(cfg.device_copy_start),
				done: C.mk_capi_copy_done_fn(cfg.device_copy_done), ctx: cfg.device_copy_ctx}
		case cfg.device_copy_start != nil || cfg.device_copy_done != nil:
			return out, invalid("device_copy_start and device_copy_done must both be set or both be NULL")
		}
	}
	if cfg.gpu >= 0 {
		p, err := sessions.PlacementOf(int(cfg.gpu))
		if err != nil {
			return out, err
		}
		out.Placement = p
	}
	return out, nil
}

//export mk_datapath_create
func mk_datapath_create(s C.mk_session_t, cfg C.mk_cdpconfig, out *C.mk_datapath_t) C.mk_status {
	return guard("datapath_create", func() error {
		if out == nil {
			return invalid("out must not be NULL")
		}
		sess, err := sessions.Session(uint64(s))
		if err != nil {
			return sessionErr(err)
		}
		c, err := datapathConfig(cfg, sess.World())
		if err != nil {
			return err
		}
		h, err := sessions.OpenDatapath(uint64(s), c)
		if err != nil {
			return sessionErr(err)
		}
		*out = C.mk_datapath_t(h)
		return nil
	})
}

//export mk_datapath_buffer
func mk_datapath_buffer(d C.mk_datapath_t, id C.uint32_t, ptr *unsafe.Pointer, bytes *C.size_t) C.mk_status {
	return guard("datapath_buffer", func() error {
		if ptr == nil || bytes == nil {
			return invalid("ptr and bytes must not be NULL")
		}
		dp, err := sessions.Datapath(uint64(d))
		if err != nil {
			return datapathErr(err)
		}
		b := dp.Buffer(transport.BufferID(id))
		if b == nil {
			return invalid("data path %d has no buffer %d", uint64(d), uint32(id))
		}
		// Shared-memory mappings, not Go heap: C may keep the pointer until destroy.
		*ptr, *bytes = unsafe.Pointer(&b[0]), C.size_t(len(b))
		return nil
	})
}

//export mk_datapath_buffer_info
func mk_datapath_buffer_info(d C.mk_datapath_t, id C.uint32_t, out *C.mk_buffer_info) C.mk_status {
	return guard("datapath_buffer_info", func() error {
		switch {
		case out == nil:
			return invalid("out must not be NULL")
		case out.size < C.size_t(unsafe.Sizeof(C.mk_buffer_info{})):
			return fmt.Errorf("%w: mk_buffer_info size %d, library expects >= %d", errVersion, int(out.size), int(unsafe.Sizeof(C.mk_buffer_info{})))
		}
		dp, err := sessions.Datapath(uint64(d))
		if err != nil {
			return datapathErr(err)
		}
		kind, host, dev, ok := dp.BufferInfo(transport.BufferID(id))
		if !ok {
			return invalid("data path %d has no buffer %d", uint64(d), uint32(id))
		}
		out.kind, out.gpu = C.uint32_t(kind), -1
		if kind == datapath.BufferDevice {
			// A device address, never dereferenced here (not a Go pointer).
			out.gpu, out.bytes = C.int32_t(dev.GPU), C.uint64_t(dev.Len)
			*(*uintptr)(unsafe.Pointer(&out.ptr)) = dev.Ptr
			return nil
		}
		out.ptr, out.bytes = unsafe.Pointer(&host[0]), C.uint64_t(len(host))
		return nil
	})
}

//export mk_datapath_fifo
func mk_datapath_fifo(d C.mk_datapath_t, fifo *unsafe.Pointer) C.mk_status {
	return guard("datapath_fifo", func() error {
		if fifo == nil {
			return invalid("fifo must not be NULL")
		}
		dp, err := sessions.Datapath(uint64(d))
		if err != nil {
			return datapathErr(err)
		}
		*fifo = unsafe.Pointer(&dp.FIFOMemory()[0])
		return nil
	})
}

//export mk_datapath_check
func mk_datapath_check(d C.mk_datapath_t) C.mk_status {
	return guard("datapath_check", func() error {
		dp, err := sessions.Datapath(uint64(d))
		if err != nil {
			return datapathErr(err)
		}
		return dp.Err()
	})
}

//export mk_datapath_stats_json
func mk_datapath_stats_json(d C.mk_datapath_t, buf *C.char, length *C.size_t) C.mk_status {
	return guard("datapath_stats_json", func() error {
		dp, err := sessions.Datapath(uint64(d))
		if err != nil {
			return datapathErr(err)
		}
		b, err := json.Marshal(dp.Stats())
		if err != nil {
			return err
		}
		return writeOut(unsafe.Pointer(buf), length, b, true)
	})
}

//export mk_datapath_destroy
func mk_datapath_destroy(d C.mk_datapath_t) C.mk_status {
	return guard("datapath_destroy", func() error {
		err := sessions.DestroyDatapath(uint64(d))
		if errors.Is(err, proxy.ErrClosed) {
			return nil
		}
		return datapathErr(err)
	})
}
