//go:build cgo

package verbs

/*
#cgo LDFLAGS: -ldl
#cgo noescape mk_post_send
#cgo nocallback mk_post_send
#cgo noescape mk_post_send_ex
#cgo nocallback mk_post_send_ex
#cgo noescape mk_post_recv
#cgo nocallback mk_post_recv
#cgo noescape mk_poll_cq
#cgo nocallback mk_poll_cq
#include <errno.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Compile-time proof that the Go work-request and completion types are the C
// shim's, byte for byte: an array of one length is not assignable to an
// array of another.
var (
	_ [unsafe.Sizeof(SendWR{})]byte               = [C.sizeof_mk_send_wr]byte{}
	_ [unsafe.Offsetof(SendWR{}.InlineValue)]byte = [unsafe.Offsetof(C.mk_send_wr{}.inline_value)]byte{}
	_ [unsafe.Offsetof(SendWR{}.AH)]byte          = [unsafe.Offsetof(C.mk_send_wr{}.ah)]byte{}
	_ [unsafe.Offsetof(SendWR{}.Length)]byte      = [unsafe.Offsetof(C.mk_send_wr{}.length)]byte{}
	_ [unsafe.Offsetof(SendWR{}.Imm)]byte         = [unsafe.Offsetof(C.mk_send_wr{}.imm)]byte{}
	_ [unsafe.Offsetof(SendWR{}.Flags)]byte       = [unsafe.Offsetof(C.mk_send_wr{}.flags)]byte{}
	_ [unsafe.Offsetof(SendWR{}.RemoteQKey)]byte  = [unsafe.Offsetof(C.mk_send_wr{}.remote_qkey)]byte{}
	_ [unsafe.Sizeof(RecvWR{})]byte               = [C.sizeof_mk_recv_wr]byte{}
	_ [unsafe.Offsetof(RecvWR{}.LKey)]byte        = [unsafe.Offsetof(C.mk_recv_wr{}.lkey)]byte{}
	_ [unsafe.Sizeof(WC{})]byte                   = [C.sizeof_mk_wc]byte{}
	_ [unsafe.Offsetof(WC{}.Imm)]byte             = [unsafe.Offsetof(C.mk_wc{}.imm)]byte{}
	_ [unsafe.Offsetof(WC{}.Flags)]byte           = [unsafe.Offsetof(C.mk_wc{}.wc_flags)]byte{}
	_ [unsafe.Offsetof(WC{}.SL)]byte              = [unsafe.Offsetof(C.mk_wc{}.sl)]byte{}
	_ [1]struct{}                                 = [1 + C.MK_IBV_QP_DEST_QPN - QPAttrDestQPN]struct{}{}
	_ [1]struct{}                                 = [1 + C.MK_IBV_ACCESS_RELAXED_ORDERING - AccessRelaxedOrdering]struct{}{}
	_ [1]struct{}                                 = [1 + C.MK_IBV_WC_RECV_RDMA_WITH_IMM - WCRecvRDMAWithImm]struct{}{}
	_ [1]struct{}                                 = [1 + C.MK_EFADV_CAPS_UNSOLICITED_WRITE_RECV - EFACapUnsolicitedWriteRecv]struct{}{}
	_ [1]struct{}                                 = [1 + C.MK_IBV_QP_EX_WITH_RDMA_READ - QPExWithRDMARead]struct{}{}
)

// Built reports whether this build has the rdma-core headers: verbs for
// libibverbs, efadv for EFA. Without them every Load fails with
// ErrNotSupported.
func Built() (verbs, efadv bool) {
	b := C.mk_built()
	return b&1 != 0, b&2 != 0
}

// Library is one dlopen'ed libibverbs. It is never unloaded: provider code
// stays reachable through function pointers in every object it made.
type Library struct {
	path string
	c    *C.mk_lib

	efaMu   sync.Mutex
	efaPath string // the libefa loaded, "" while none
}

var loaded struct {
	sync.Mutex
	byPath map[string]*Library
}

// Load opens the libibverbs at path (DefaultLibrary when ""), or returns the
// one already open. A library that cannot be loaded, lacks an entry point,
// or a build without the rdma-core headers gives an error matching
// ErrNotSupported.
func Load(path string) (*Library, error) {
	if path == "" {
		path = DefaultLibrary
	}
	loaded.Lock()
	defer loaded.Unlock()
	if l := loaded.byPath[path]; l != nil {
		return l, nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	var c *C.mk_lib
	if rc := C.mk_lib_open(cpath, &c, &msg[0], C.size_t(len(msg))); rc != 0 {
		return nil, loadError(path, rc, C.GoString(&msg[0]))
	}
	l := &Library{path: path, c: c}
	if loaded.byPath == nil {
		loaded.byPath = make(map[string]*Library)
	}
	loaded.byPath[path] = l
	return l, nil
}

func loadError(path string, rc C.int, msg string) error {
	switch rc {
	case C.MK_ERR_NO_HEADERS:
		return fmt.Errorf("load %s: this build has no rdma-core headers (install libibverbs-dev, then rebuild after go clean -cache: "+
			"Go's build cache does not notice new system headers): %w", path, ErrNotSupported)
	case C.MK_ERR_NO_SYMBOL:
		return fmt.Errorf("load %s: no symbol %s (rdma-core too old): %w", path, msg, ErrNotSupported)
	case C.MK_ERR_NO_LIBRARY:
		return fmt.Errorf("load %s: %s: %w", path, strings.TrimPrefix(msg, path+": "), ErrNotSupported)
	}
	return fmt.Errorf("load %s: %w", path, syscall.Errno(rc))
}

// Path is the path Load was given.
func (l *Library) Path() string { return l.path }

// LoadEFA opens libefa (DefaultEFALibrary when path is "") for this
// library's EFA calls. Loading it again is a no-op.
func (l *Library) LoadEFA(path string) error {
	if path == "" {
		path = DefaultEFALibrary
	}
	l.efaMu.Lock()
	defer l.efaMu.Unlock()
	if l.efaPath != "" {
		return nil
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	if rc := C.mk_lib_open_efa(l.c, cpath, &msg[0], C.size_t(len(msg))); rc != 0 {
		return loadError(path, rc, C.GoString(&msg[0]))
	}
	l.efaPath = path
	return nil
}

// Features says which optional entry points the library has.
func (l *Library) Features() Features {
	f := C.mk_lib_features(l.c)
	return Features{
		DMABuf:     f&C.MK_FEAT_DMABUF != 0,
		RegMRIOVA2: f&C.MK_FEAT_IOVA2 != 0,
		GIDTable:   f&C.MK_FEAT_GID_TABLE != 0,
		QPEx:       f&C.MK_FEAT_QP_EX != 0,
		EFA:        f&C.MK_FEAT_EFA != 0,
	}
}

// call turns a shim result into an error naming fn.
func call(fn string, rc C.int) error {
	switch {
	case rc == 0:
		return nil
	case rc == C.MK_ERR_NO_HEADERS:
		return fmt.Errorf("%s: built without rdma-core headers: %w", fn, ErrNotSupported)
	case rc == C.MK_ERR_NO_FEATURE:
		return fmt.Errorf("%s: not in this libibverbs/libefa: %w", fn, ErrNotSupported)
	case rc < 0:
		return &CallError{Func: fn, Errno: syscall.Errno(-rc)}
	}
	return &CallError{Func: fn, Errno: syscall.Errno(rc)}
}

// Devices lists the RDMA devices libibverbs sees.
func (l *Library) Devices() ([]DeviceInfo, error) {
	buf := make([]C.mk_device_info, 64)
	for {
		var n C.int
		if err := call("ibv_get_device_list", C.mk_list_devices(l.c, &buf[0], C.int(len(buf)), &n)); err != nil {
			return nil, err
		}
		if int(n) > len(buf) {
			buf = make([]C.mk_device_info, n)
			continue
		}
		out := make([]DeviceInfo, n)
		for i := range out {
			d := &buf[i]
			out[i] = DeviceInfo{
				Name:          C.GoString(&d.name[0]),
				GUID:          uint64(d.guid),
				NodeType:      int(d.node_type),
				TransportType: int(d.transport_type),
			}
		}
		return out, nil
	}
}

// handle is a verbs object's C pointer; zero once closed. Close swaps it
// out, so a second Close is a no-op, and puts it back if the destroy call
// fails so that Close can be retried.
type handle struct{ h atomic.Uintptr }

func (h *handle) get() C.uintptr_t { return C.uintptr_t(h.h.Load()) }

func (h *handle) close(fn string, destroy func(C.uintptr_t) C.int) error {
	v := h.h.Swap(0)
	if v == 0 {
		return nil
	}
	if err := call(fn, destroy(C.uintptr_t(v))); err != nil {
		h.h.Store(v)
		return err
	}
	return nil
}

// Context is an open device (struct ibv_context).
type Context struct {
	lib  *Library
	name string
	handle
}

// Open opens the device called name ("mlx5_0", "rdmap79s0").
func (l *Library) Open(name string) (*Context, error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var h C.uintptr_t
	rc := C.mk_open_device(l.c, cname, &h)
	if rc == C.ENODEV {
		return nil, fmt.Errorf("open %s: no such device among libibverbs' devices: %w", name, ErrNotSupported)
	}
	if err := call("ibv_open_device", rc); err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	c := &Context{lib: l, name: name}
	c.h.Store(uintptr(h))
	return c, nil
}

// Name is the device name.
func (c *Context) Name() string { return c.name }

// Library is the library the context came from.
func (c *Context) Library() *Library { return c.lib }

// Close closes the device. Every PD, CQ, QP, MR and AH of it must be
// closed first.
func (c *Context) Close() error {
	return c.close("ibv_close_device", func(h C.uintptr_t) C.int { return C.mk_close_device(c.lib.c, h) })
}

func (c *Context) live(fn string) (C.uintptr_t, error) {
	h := c.get()
	if h == 0 {
		return 0, fmt.Errorf("%s on %s: %w", fn, c.name, ErrClosed)
	}
	return h, nil
}

// QueryDevice returns the device's attributes.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	h, err := c.live("ibv_query_device")
	if err != nil {
		return DeviceAttr{}, err
	}
	var a C.mk_device_attr
	if err := call("ibv_query_device", C.mk_query_device(c.lib.c, h, &a)); err != nil {
		return DeviceAttr{}, err
	}
	return DeviceAttr{
		FirmwareVersion:   C.GoString(&a.fw_ver[0]),
		NodeGUID:          uint64(a.node_guid),
		VendorID:          uint32(a.vendor_id),
		VendorPartID:      uint32(a.vendor_part_id),
		HWVersion:         uint32(a.hw_ver),
		MaxMRSize:         uint64(a.max_mr_size),
		MaxQP:             int(a.max_qp),
		MaxQPWR:           int(a.max_qp_wr),
		MaxSGE:            int(a.max_sge),
		MaxCQ:             int(a.max_cq),
		MaxCQE:            int(a.max_cqe),
		MaxMR:             int(a.max_mr),
		MaxPD:             int(a.max_pd),
		MaxAH:             int(a.max_ah),
		MaxQPRDAtom:       int(a.max_qp_rd_atom),
		MaxQPInitRDAtom:   int(a.max_qp_init_rd_atom),
		PhysicalPortCount: int(a.phys_port_cnt),
	}, nil
}

// QueryPort returns a port's attributes.
func (c *Context) QueryPort(port int) (PortAttr, error) {
	h, err := c.live("ibv_query_port")
	if err != nil {
		return PortAttr{}, err
	}
	if port < 1 || port > 255 {
		return PortAttr{}, fmt.Errorf("ibv_query_port %s: port %d out of range: %w", c.name, port, syscall.EINVAL)
	}
	var a C.mk_port_attr
	if err := call("ibv_query_port", C.mk_query_port(c.lib.c, h, C.uint8_t(port), &a)); err != nil {
		return PortAttr{}, err
	}
	return PortAttr{
		State:        PortState(a.state),
		MaxMTU:       MTU(a.max_mtu),
		ActiveMTU:    MTU(a.active_mtu),
		GIDTableLen:  int(a.gid_tbl_len),
		PortCapFlags: uint32(a.port_cap_flags),
		MaxMsgSize:   uint32(a.max_msg_sz),
		LID:          uint16(a.lid),
		SMLID:        uint16(a.sm_lid),
		LMC:          uint8(a.lmc),
		LinkLayer:    LinkLayer(a.link_layer),
		ActiveWidth:  uint8(a.active_width),
		ActiveSpeed:  uint8(a.active_speed),
		PhysState:    uint8(a.phys_state),
	}, nil
}

// QueryGID returns one GID table entry's address.
func (c *Context) QueryGID(port, index int) (GID, error) {
	h, err := c.live("ibv_query_gid")
	if err != nil {
		return GID{}, err
	}
	var g [16]C.uint8_t
	if err := call("ibv_query_gid", C.mk_query_gid(c.lib.c, h, C.uint8_t(port), C.int(index), &g[0])); err != nil {
		return GID{}, err
	}
	var out GID
	for i := range out {
		out[i] = byte(g[i])
	}
	return out, nil
}

// GIDTable returns the valid entries of a port's GID table with their types
// and network devices: through _ibv_query_gid_table where the library has
// it (rdma-core >= 31), else from sysfs under sysfsRoot ("" means /sys).
func (c *Context) GIDTable(port int, sysfsRoot string) ([]GIDEntry, error) {
	h, err := c.live("ibv_query_gid_table")
	if err != nil {
		return nil, err
	}
	buf := make([]C.mk_gid_entry, 256)
	for {
		var n C.int
		rc := C.mk_query_gid_table(c.lib.c, h, &buf[0], C.int(len(buf)), &n)
		if rc == C.MK_ERR_NO_FEATURE {
			pa, err := c.QueryPort(port)
			if err != nil {
				return nil, err
			}
			return ReadSysfsGIDTable(sysfsRoot, c.name, port, pa.GIDTableLen)
		}
		if rc == C.EINVAL && len(buf) < 1<<16 {
			// Too small a buffer for every port's table.
			buf = make([]C.mk_gid_entry, 4*len(buf))
			continue
		}
		if err := call("ibv_query_gid_table", rc); err != nil {
			return nil, err
		}
		var out []GIDEntry
		for i := range int(n) {
			e := &buf[i]
			if int(e.port) != port {
				continue
			}
			ge := GIDEntry{Index: int(e.index), Type: GIDType(e._type)}
			for j := range ge.GID {
				ge.GID[j] = byte(e.gid[j])
			}
			if e.ifindex != 0 {
				if ifc, err := net.InterfaceByIndex(int(e.ifindex)); err == nil {
					ge.NetDev = ifc.Name
				}
			}
			out = append(out, ge)
		}
		return out, nil
	}
}

// AllocPD allocates a protection domain.
func (c *Context) AllocPD() (*PD, error) {
	h, err := c.live("ibv_alloc_pd")
	if err != nil {
		return nil, err
	}
	var pd C.uintptr_t
	if err := call("ibv_alloc_pd", C.mk_alloc_pd(c.lib.c, h, &pd)); err != nil {
		return nil, err
	}
	p := &PD{ctx: c}
	p.h.Store(uintptr(pd))
	return p, nil
}

// CreateCQ creates a completion queue of at least cqe entries, without a
// completion channel (the proxy polls).
func (c *Context) CreateCQ(cqe int) (*CQ, error) {
	h, err := c.live("ibv_create_cq")
	if err != nil {
		return nil, err
	}
	var cq C.uintptr_t
	var actual C.int
	if err := call("ibv_create_cq", C.mk_create_cq(c.lib.c, h, C.int(cqe), &cq, &actual)); err != nil {
		return nil, err
	}
	q := &CQ{ctx: c, size: int(actual)}
	q.h.Store(uintptr(cq))
	return q, nil
}

// EFAQueryDevice calls efadv_query_device; LoadEFA must have succeeded.
func (c *Context) EFAQueryDevice() (EFAAttr, error) {
	h, err := c.live("efadv_query_device")
	if err != nil {
		return EFAAttr{}, err
	}
	var a C.mk_efa_attr
	if err := call("efadv_query_device", C.mk_efa_query_device(c.lib.c, h, &a)); err != nil {
		return EFAAttr{}, err
	}
	return EFAAttr{
		MaxSQWR:       uint32(a.max_sq_wr),
		MaxRQWR:       uint32(a.max_rq_wr),
		MaxSQSGE:      uint16(a.max_sq_sge),
		MaxRQSGE:      uint16(a.max_rq_sge),
		InlineBufSize: uint16(a.inline_buf_size),
		DeviceCaps:    uint32(a.device_caps),
		MaxRDMASize:   uint32(a.max_rdma_size),
	}, nil
}

// PD is a protection domain.
type PD struct {
	ctx *Context
	handle
}

// Close deallocates the PD; its MRs, QPs and AHs must be closed first.
func (p *PD) Close() error {
	return p.close("ibv_dealloc_pd", func(h C.uintptr_t) C.int { return C.mk_dealloc_pd(p.ctx.lib.c, h) })
}

func (p *PD) live(fn string) (C.uintptr_t, error) {
	h := p.get()
	if h == 0 {
		return 0, fmt.Errorf("%s on %s: protection domain %w", fn, p.ctx.name, ErrClosed)
	}
	return h, nil
}

// MR is a registered memory region.
type MR struct {
	pd         *PD
	lkey, rkey uint32
	handle
}

// LKey and RKey are the region's local and remote keys.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey is the key peers write with.
func (m *MR) RKey() uint32 { return m.rkey }

// Close deregisters the region.
func (m *MR) Close() error {
	return m.close("ibv_dereg_mr", func(h C.uintptr_t) C.int { return C.mk_dereg_mr(m.pd.ctx.lib.c, h) })
}

func (p *PD) newMR(m C.mk_mr) *MR {
	mr := &MR{pd: p, lkey: uint32(m.lkey), rkey: uint32(m.rkey)}
	mr.h.Store(uintptr(m.mr))
	return mr
}

// RegMR registers [addr, addr+length) of this process's address space: host
// memory, or GPU memory where nvidia-peermem lets the HCA pin it. Relaxed
// ordering in access needs ibv_reg_mr_iova2 and is dropped without it.
func (p *PD) RegMR(addr uintptr, length uint64, access Access) (*MR, error) {
	h, err := p.live("ibv_reg_mr")
	if err != nil {
		return nil, err
	}
	var m C.mk_mr
	if err := call("ibv_reg_mr", C.mk_reg_mr(p.ctx.lib.c, h, C.uint64_t(addr), C.uint64_t(length), C.int(access), &m)); err != nil {
		return nil, err
	}
	return p.newMR(m), nil
}

// RegDMABufMR registers length bytes at offset of the DMA-BUF fd (GPU
// memory exported by cuMemGetHandleForAddressRange), addressed by peers as
// iova. Libraries older than rdma-core 34 give ErrNotSupported.
func (p *PD) RegDMABufMR(offset, length, iova uint64, fd int, access Access) (*MR, error) {
	h, err := p.live("ibv_reg_dmabuf_mr")
	if err != nil {
		return nil, err
	}
	var m C.mk_mr
	rc := C.mk_reg_dmabuf_mr(p.ctx.lib.c, h, C.uint64_t(offset), C.uint64_t(length), C.uint64_t(iova), C.int(fd), C.int(access), &m)
	if err := call("ibv_reg_dmabuf_mr", rc); err != nil {
		return nil, err
	}
	return p.newMR(m), nil
}

// CQ is a completion queue.
type CQ struct {
	ctx  *Context
	size int
	handle
}

// Size is the number of entries the provider gave the queue.
func (q *CQ) Size() int { return q.size }

// Close destroys the CQ; the QPs using it must be closed first.
func (q *CQ) Close() error {
	return q.close("ibv_destroy_cq", func(h C.uintptr_t) C.int { return C.mk_destroy_cq(q.ctx.lib.c, h) })
}

// Poll fills wcs with up to len(wcs) completions (ibv_poll_cq through the
// provider's op) and returns how many. It allocates nothing. Poll must not
// run concurrently with Close.
func (q *CQ) Poll(wcs []WC) (int, error) {
	if len(wcs) == 0 {
		return 0, nil
	}
	h := q.get()
	if h == 0 {
		return 0, fmt.Errorf("ibv_poll_cq on %s: %w", q.ctx.name, ErrClosed)
	}
	n := C.mk_poll_cq(h, (*C.mk_wc)(unsafe.Pointer(&wcs[0])), C.int(len(wcs)))
	if n < 0 {
		return 0, call("ibv_poll_cq", n)
	}
	return int(n), nil
}

// QP is a queue pair.
type QP struct {
	pd   *PD
	kind QPKind
	num  uint32
	caps QPCaps
	qpx  uintptr
	handle
}

// CreateQP creates an RC or SRD queue pair on the PD with the given CQs.
// SRD needs LoadEFA and ibv_qp_to_qp_ex (rdma-core >= 24).
func (p *PD) CreateQP(in QPInit, send, recv *CQ) (*QP, error) {
	fn := "ibv_create_qp"
	if in.Kind == QPKindSRD {
		fn = "efadv_create_qp_ex"
	}
	h, err := p.live(fn)
	if err != nil {
		return nil, err
	}
	s, r := send.get(), recv.get()
	if s == 0 || r == 0 {
		return nil, fmt.Errorf("%s on %s: completion queue %w", fn, p.ctx.name, ErrClosed)
	}
	ci := C.mk_qp_init{
		kind:            C.int32_t(in.Kind),
		max_send_wr:     C.uint32_t(in.MaxSendWR),
		max_recv_wr:     C.uint32_t(in.MaxRecvWR),
		max_send_sge:    C.uint32_t(in.MaxSendSGE),
		max_recv_sge:    C.uint32_t(in.MaxRecvSGE),
		max_inline_data: C.uint32_t(in.MaxInlineData),
		send_ops_flags:  C.uint64_t(in.SendOps),
		efa_flags:       C.uint16_t(in.EFAFlags),
		efa_sl:          C.uint8_t(in.EFASL),
	}
	var out C.mk_qp
	if err := call(fn, C.mk_create_qp(p.ctx.lib.c, h, s, r, &ci, &out)); err != nil {
		return nil, err
	}
	qp := &QP{
		pd:   p,
		kind: in.Kind,
		num:  uint32(out.qpn),
		qpx:  uintptr(out.qpx),
		caps: QPCaps{
			MaxSendWR:     uint32(out.max_send_wr),
			MaxRecvWR:     uint32(out.max_recv_wr),
			MaxInlineData: uint32(out.max_inline_data),
		},
	}
	qp.h.Store(uintptr(out.qp))
	return qp, nil
}

// Num is the QP number.
func (q *QP) Num() uint32 { return q.num }

// Caps is what the provider granted at creation.
func (q *QP) Caps() QPCaps { return q.caps }

// Close destroys the QP.
func (q *QP) Close() error {
	return q.close("ibv_destroy_qp", func(h C.uintptr_t) C.int { return C.mk_destroy_qp(q.pd.ctx.lib.c, h) })
}

func cAH(a *AHAttr) C.mk_ah_attr {
	var c C.mk_ah_attr
	for i, b := range a.DGID {
		c.dgid[i] = C.uint8_t(b)
	}
	c.flow_label = C.uint32_t(a.FlowLabel)
	c.dlid = C.uint16_t(a.DLID)
	c.sgid_index = C.uint8_t(a.SGIDIndex)
	c.hop_limit = C.uint8_t(a.HopLimit)
	c.traffic_class = C.uint8_t(a.TrafficClass)
	if a.IsGlobal {
		c.is_global = 1
	}
	c.sl = C.uint8_t(a.SL)
	c.src_path_bits = C.uint8_t(a.SrcPathBits)
	c.port_num = C.uint8_t(a.Port)
	c.static_rate = C.uint8_t(a.StaticRate)
	return c
}

// Modify calls ibv_modify_qp with the fields of a that mask names.
func (q *QP) Modify(a QPAttr, mask QPAttrMask) error {
	h := q.get()
	if h == 0 {
		return fmt.Errorf("ibv_modify_qp QP %d: %w", q.num, ErrClosed)
	}
	c := C.mk_qp_attr{
		ah:                 cAH(&a.AH),
		qp_state:           C.uint32_t(a.State),
		path_mtu:           C.uint32_t(a.PathMTU),
		qkey:               C.uint32_t(a.QKey),
		rq_psn:             C.uint32_t(a.RQPSN),
		sq_psn:             C.uint32_t(a.SQPSN),
		dest_qp_num:        C.uint32_t(a.DestQPN),
		qp_access_flags:    C.uint32_t(a.AccessFlags),
		pkey_index:         C.uint16_t(a.PKeyIndex),
		port_num:           C.uint8_t(a.Port),
		max_rd_atomic:      C.uint8_t(a.MaxRDAtomic),
		max_dest_rd_atomic: C.uint8_t(a.MaxDestRDAtomic),
		min_rnr_timer:      C.uint8_t(a.MinRNRTimer),
		timeout:            C.uint8_t(a.Timeout),
		retry_cnt:          C.uint8_t(a.RetryCnt),
		rnr_retry:          C.uint8_t(a.RNRRetry),
	}
	if err := call("ibv_modify_qp", C.mk_modify_qp(q.pd.ctx.lib.c, h, &c, C.int(mask))); err != nil {
		return fmt.Errorf("QP %d to %v: %w", q.num, a.State, err)
	}
	return nil
}

// PostSend posts wrs in order (ibv_post_send through the provider's op, up
// to 32 per call) and returns how many the provider took. It allocates
// nothing; it must not run concurrently with Close or another PostSend on
// the same QP.
func (q *QP) PostSend(wrs []SendWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	h := q.get()
	if h == 0 {
		return 0, fmt.Errorf("ibv_post_send QP %d: %w", q.num, ErrClosed)
	}
	var posted C.int
	rc := C.mk_post_send(h, (*C.mk_send_wr)(unsafe.Pointer(&wrs[0])), C.int(len(wrs)), &posted)
	return int(posted), call("ibv_post_send", rc)
}

// PostSendEx posts wrs to an SRD QP in one ibv_wr_start/ibv_wr_complete
// batch: all of them or, on error, none.
func (q *QP) PostSendEx(wrs []SendWR) error {
	if len(wrs) == 0 {
		return nil
	}
	if q.qpx == 0 {
		return fmt.Errorf("ibv_wr_complete QP %d: not an extended QP: %w", q.num, ErrNotSupported)
	}
	if q.get() == 0 {
		return fmt.Errorf("ibv_wr_complete QP %d: %w", q.num, ErrClosed)
	}
	return call("ibv_wr_complete", C.mk_post_send_ex(C.uintptr_t(q.qpx), (*C.mk_send_wr)(unsafe.Pointer(&wrs[0])), C.int(len(wrs))))
}

// PostRecv posts receive work requests and returns how many were taken.
func (q *QP) PostRecv(wrs []RecvWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	h := q.get()
	if h == 0 {
		return 0, fmt.Errorf("ibv_post_recv QP %d: %w", q.num, ErrClosed)
	}
	var posted C.int
	rc := C.mk_post_recv(h, (*C.mk_recv_wr)(unsafe.Pointer(&wrs[0])), C.int(len(wrs)), &posted)
	return int(posted), call("ibv_post_recv", rc)
}

// AH is an address handle.
type AH struct {
	pd *PD
	handle
}

// CreateAH creates an address handle (SRD peers).
func (p *PD) CreateAH(a AHAttr) (*AH, error) {
	h, err := p.live("ibv_create_ah")
	if err != nil {
		return nil, err
	}
	c := cAH(&a)
	var ah C.uintptr_t
	if err := call("ibv_create_ah", C.mk_create_ah(p.ctx.lib.c, h, &c, &ah)); err != nil {
		return nil, err
	}
	x := &AH{pd: p}
	x.h.Store(uintptr(ah))
	return x, nil
}

// Handle is what SendWR.AH takes; 0 once closed.
func (a *AH) Handle() AHHandle { return AHHandle(a.get()) }

// Close destroys the address handle.
func (a *AH) Close() error {
	return a.close("ibv_destroy_ah", func(h C.uintptr_t) C.int { return C.mk_destroy_ah(a.pd.ctx.lib.c, h) })
}
