//go:build cgo

package nvml

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The few NVML types used here, declared by hand: nvml.h is not installed
// where we build, and this package must not depend on it. NVML's enums
// (nvmlReturn_t, nvmlEnableState_t, nvmlIntNvLinkDeviceType_t,
// nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t) are int-sized, so they are int
// here. nvmlDevice_t is nvml.h's opaque pointer (go-nvml's vendored copy
// wraps it in a one-pointer struct, which has the same ABI).
//
// Checked on the GPU machine against CUDA 13.0's
// /usr/local/cuda-13.0/include/nvml.h: static asserts on nvmlPciInfo_t's
// size and offsets, on the enums' sizes and the values used here, and each
// entry point in MK_NVML_SYMBOLS assigned without warnings to a pointer of
// the type in mk_nvml below (with the enum types where mk_nvml has int);
// and driver 580.159.04's libnvidia-ml.so.1 exports every one of them.
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

// nvmlPciInfo_t, field for field as in nvml.h of NVML 13.4.92 (CUDA 13.x
// cuda_nvml_dev; the copy vendored by github.com/NVIDIA/go-nvml v0.13.4-1,
// pkg/nvml/nvml.h, "typedef struct nvmlPciInfo_st"), identical in CUDA
// 13.0's nvml.h. This is the layout the
// versioned entry points below fill: nvmlDeviceGetPciInfo_v3 and
// nvmlDeviceGetNvLinkRemotePciInfo_v2. 68 bytes, busId at offset 36.
typedef struct nvmlPciInfo_st {
	char busIdLegacy[16]; // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE, "%04X:%02X:%02X.0"
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;    // device ID << 16 | vendor ID
	unsigned int pciSubSystemId;
	char busId[32];              // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE, "%08X:%02X:%02X.0"
} nvmlPciInfo_t;

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t must match nvml.h");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t must match nvml.h");

// mk_nvml holds the library handle and one pointer per entry point.
// MK_NVML_SYMBOLS names the symbols looked up: the versioned names that
// nvml.h (13.4.92) maps the plain ones to with "#define nvmlInit
// nvmlInit_v2" and so on, unless NVML_NO_UNVERSIONED_FUNC_DEFS is set. The
// entry points without a suffix have no other version. A driver lacking
// any of them makes Init fail with ErrFunctionNotFound.
typedef struct {
	void *handle;
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*shutdown)(void);
	const char *(*error_string)(nvmlReturn_t);
	nvmlReturn_t (*device_get_count)(unsigned int *);
	nvmlReturn_t (*device_get_handle_by_index)(unsigned int, nvmlDevice_t *);
	nvmlReturn_t (*device_get_handle_by_pci_bus_id)(const char *, nvmlDevice_t *);
	nvmlReturn_t (*device_get_pci_info)(nvmlDevice_t, nvmlPciInfo_t *);
	nvmlReturn_t (*device_get_nvlink_state)(nvmlDevice_t, unsigned int, int *);
	nvmlReturn_t (*device_get_nvlink_remote_device_type)(nvmlDevice_t, unsigned int, int *);
	nvmlReturn_t (*device_get_nvlink_remote_pci_info)(nvmlDevice_t, unsigned int, nvmlPciInfo_t *);
	nvmlReturn_t (*device_get_p2p_status)(nvmlDevice_t, nvmlDevice_t, int, int *);
} mk_nvml;

#define MK_NVML_SYMBOLS(X)                                                   \
	X(init, "nvmlInit_v2")                                               \
	X(shutdown, "nvmlShutdown")                                          \
	X(error_string, "nvmlErrorString")                                   \
	X(device_get_count, "nvmlDeviceGetCount_v2")                         \
	X(device_get_handle_by_index, "nvmlDeviceGetHandleByIndex_v2")       \
	X(device_get_handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2") \
	X(device_get_pci_info, "nvmlDeviceGetPciInfo_v3")                    \
	X(device_get_nvlink_state, "nvmlDeviceGetNvLinkState")               \
	X(device_get_nvlink_remote_device_type, "nvmlDeviceGetNvLinkRemoteDeviceType") \
	X(device_get_nvlink_remote_pci_info, "nvmlDeviceGetNvLinkRemotePciInfo_v2") \
	X(device_get_p2p_status, "nvmlDeviceGetP2PStatus")

enum { MK_NVML_OK = 0, MK_NVML_NO_LIBRARY = 1, MK_NVML_NO_SYMBOL = 2 };

// mk_nvml_open dlopens path and resolves every entry point into t. On
// failure nothing stays open, t is zeroed and msg holds dlerror() (no
// library) or the missing symbol's name. dlerror is per thread, so it is
// read here, in the same C call as the dlopen.
static int mk_nvml_open(const char *path, mk_nvml *t, char *msg, size_t msglen) {
	memset(t, 0, sizeof *t);
	dlerror();
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(msg, msglen, "%s", e != NULL ? e : "dlopen failed");
		return MK_NVML_NO_LIBRARY;
	}
#define MK_NVML_RESOLVE(field, name)                 \
	*(void **)(&t->field) = dlsym(h, name);      \
	if (t->field == NULL) {                      \
		snprintf(msg, msglen, "%s", name);   \
		dlclose(h);                          \
		memset(t, 0, sizeof *t);             \
		return MK_NVML_NO_SYMBOL;            \
	}
	MK_NVML_SYMBOLS(MK_NVML_RESOLVE)
#undef MK_NVML_RESOLVE
	t->handle = h;
	return MK_NVML_OK;
}

static int mk_nvml_close(mk_nvml *t, char *msg, size_t msglen) {
	dlerror();
	int rc = dlclose(t->handle);
	if (rc != 0) {
		const char *e = dlerror();
		snprintf(msg, msglen, "%s", e != NULL ? e : "dlclose failed");
	}
	memset(t, 0, sizeof *t);
	return rc;
}

// Trampolines: Go cannot call C function pointers. Device handles cross
// into Go as integers (uintptr_t) so the Go runtime never sees a C pointer
// it might check.

static nvmlReturn_t mk_nvml_init(const mk_nvml *t) { return t->init(); }

static nvmlReturn_t mk_nvml_shutdown(const mk_nvml *t) { return t->shutdown(); }

static const char *mk_nvml_error_string(const mk_nvml *t, nvmlReturn_t r) { return t->error_string(r); }

static nvmlReturn_t mk_nvml_device_get_count(const mk_nvml *t, unsigned int *n) {
	return t->device_get_count(n);
}

static nvmlReturn_t mk_nvml_device_get_handle_by_index(const mk_nvml *t, unsigned int i, uintptr_t *dev) {
	nvmlDevice_t d = NULL;
	nvmlReturn_t r = t->device_get_handle_by_index(i, &d);
	*dev = (uintptr_t)d;
	return r;
}

static nvmlReturn_t mk_nvml_device_get_handle_by_pci_bus_id(const mk_nvml *t, const char *bus_id, uintptr_t *dev) {
	nvmlDevice_t d = NULL;
	nvmlReturn_t r = t->device_get_handle_by_pci_bus_id(bus_id, &d);
	*dev = (uintptr_t)d;
	return r;
}

static nvmlReturn_t mk_nvml_device_get_pci_info(const mk_nvml *t, uintptr_t dev, nvmlPciInfo_t *pci) {
	memset(pci, 0, sizeof *pci);
	nvmlReturn_t r = t->device_get_pci_info((nvmlDevice_t)dev, pci);
	pci->busId[sizeof pci->busId - 1] = 0;
	return r;
}

static nvmlReturn_t mk_nvml_device_get_nvlink_state(const mk_nvml *t, uintptr_t dev, unsigned int link, int *active) {
	return t->device_get_nvlink_state((nvmlDevice_t)dev, link, active);
}

static nvmlReturn_t mk_nvml_device_get_nvlink_remote_device_type(const mk_nvml *t, uintptr_t dev, unsigned int link, int *kind) {
	return t->device_get_nvlink_remote_device_type((nvmlDevice_t)dev, link, kind);
}

static nvmlReturn_t mk_nvml_device_get_nvlink_remote_pci_info(const mk_nvml *t, uintptr_t dev, unsigned int link, nvmlPciInfo_t *pci) {
	memset(pci, 0, sizeof *pci);
	nvmlReturn_t r = t->device_get_nvlink_remote_pci_info((nvmlDevice_t)dev, link, pci);
	pci->busId[sizeof pci->busId - 1] = 0;
	return r;
}

static nvmlReturn_t mk_nvml_device_get_p2p_status(const mk_nvml *t, uintptr_t dev1, uintptr_t dev2, int index, int *status) {
	return t->device_get_p2p_status((nvmlDevice_t)dev1, (nvmlDevice_t)dev2, index, status);
}
*/
import "C"

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"unsafe"
)

// Library is NVML loaded from a shared library with dlopen. It is safe for
// concurrent use.
type Library struct {
	path string

	// mu is held for writing by Init and Shutdown and for reading by every
	// call into NVML, so no call can race with dlclose.
	mu   sync.RWMutex
	refs int       // successful Inits not yet matched by a Shutdown
	gen  uint64    // counts dlopens; a Device from an earlier one is stale
	sym  C.mk_nvml // handle and entry points; zero while refs == 0
}

// New returns a Library for the shared library at path (DefaultLibrary,
// found by the dynamic loader, when path is ""). It loads nothing yet.
func New(path string) *Library {
	if path == "" {
		path = DefaultLibrary
	}
	return &Library{path: path}
}

// Init loads the library (in the first Init since it was last closed) and
// calls nvmlInit_v2. A missing or unloadable library gives an error matching
// ErrLibraryNotFound, one without every entry point this package uses an
// error matching ErrFunctionNotFound.
func (l *Library) Init() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		if err := l.open(); err != nil {
			return err
		}
	}
	if r := Return(C.mk_nvml_init(&l.sym)); r != Success {
		err := l.callError("nvmlInit_v2", r)
		if l.refs == 0 {
			if cerr := l.close(); cerr != nil {
				return fmt.Errorf("%w (and %w)", err, cerr)
			}
		}
		return err
	}
	l.refs++
	return nil
}

// Shutdown calls nvmlShutdown for one earlier Init; the last one also closes
// the library. If nvmlShutdown fails, nothing changes: the Init still counts
// and the library stays open.
func (l *Library) Shutdown() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refs == 0 {
		return fmt.Errorf("shutdown %s without init: %w", l.path, ErrUninitialized)
	}
	if r := Return(C.mk_nvml_shutdown(&l.sym)); r != Success {
		return l.callError("nvmlShutdown", r)
	}
	l.refs--
	if l.refs == 0 {
		return l.close()
	}
	return nil
}

// open dlopens the library and resolves its entry points. l.mu is held.
func (l *Library) open() error {
	cpath := C.CString(l.path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	switch C.mk_nvml_open(cpath, &l.sym, &msg[0], C.size_t(len(msg))) {
	case C.MK_NVML_OK:
		l.gen++
		return nil
	case C.MK_NVML_NO_SYMBOL:
		return fmt.Errorf("load %s: no symbol %s: %w", l.path, C.GoString(&msg[0]), ErrFunctionNotFound)
	default:
		// dlerror() usually starts with the path itself.
		reason := strings.TrimPrefix(C.GoString(&msg[0]), l.path+": ")
		return fmt.Errorf("load %s: %s: %w", l.path, reason, ErrLibraryNotFound)
	}
}

// close dlcloses the library. l.mu is held.
func (l *Library) close() error {
	var msg [512]C.char
	if C.mk_nvml_close(&l.sym, &msg[0], C.size_t(len(msg))) != 0 {
		return fmt.Errorf("close %s: %s", l.path, C.GoString(&msg[0]))
	}
	return nil
}

// callError describes a failed call, with NVML's text for r. l.mu is held
// and the library open.
func (l *Library) callError(fn string, r Return) error {
	return &CallError{Func: fn, Return: r, Text: C.GoString(C.mk_nvml_error_string(&l.sym, C.nvmlReturn_t(r)))}
}

// DeviceCount calls nvmlDeviceGetCount_v2.
func (l *Library) DeviceCount() (int, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	const fn = "nvmlDeviceGetCount_v2"
	if l.refs == 0 {
		return 0, &CallError{Func: fn, Return: ErrUninitialized}
	}
	var n C.uint
	if r := Return(C.mk_nvml_device_get_count(&l.sym, &n)); r != Success {
		return 0, l.callError(fn, r)
	}
	return int(n), nil
}

// DeviceByIndex calls nvmlDeviceGetHandleByIndex_v2.
func (l *Library) DeviceByIndex(index int) (Device, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	const fn = "nvmlDeviceGetHandleByIndex_v2"
	if l.refs == 0 {
		return nil, &CallError{Func: fn, Return: ErrUninitialized}
	}
	if index < 0 || int64(index) > math.MaxUint32 {
		return nil, &CallError{Func: fn, Return: ErrInvalidArgument}
	}
	var h C.uintptr_t
	if r := Return(C.mk_nvml_device_get_handle_by_index(&l.sym, C.uint(index), &h)); r != Success {
		return nil, l.callError(fn, r)
	}
	return &device{lib: l, gen: l.gen, handle: h}, nil
}

// DeviceByPCIBusID calls nvmlDeviceGetHandleByPciBusId_v2.
func (l *Library) DeviceByPCIBusID(busID string) (Device, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	const fn = "nvmlDeviceGetHandleByPciBusId_v2"
	if l.refs == 0 {
		return nil, &CallError{Func: fn, Return: ErrUninitialized}
	}
	cid := C.CString(busID)
	defer C.free(unsafe.Pointer(cid))
	var h C.uintptr_t
	if r := Return(C.mk_nvml_device_get_handle_by_pci_bus_id(&l.sym, cid, &h)); r != Success {
		return nil, l.callError(fn, r)
	}
	return &device{lib: l, gen: l.gen, handle: h}, nil
}

// device is a GPU handle of a Library.
type device struct {
	lib    *Library
	gen    uint64 // lib.gen when the handle was made
	handle C.uintptr_t
}

// lock read-locks the library for one call on d, or fails with
// ErrUninitialized (without calling NVML) when the library was closed
// since d was made.
func (d *device) lock(fn string) error {
	d.lib.mu.RLock()
	if d.lib.refs == 0 || d.lib.gen != d.gen {
		d.lib.mu.RUnlock()
		return &CallError{Func: fn, Return: ErrUninitialized}
	}
	return nil
}

func (d *device) unlock() { d.lib.mu.RUnlock() }

// cLink converts a link number, failing like NVML for out-of-range ones.
func cLink(fn string, link int) (C.uint, error) {
	if link < 0 || int64(link) > math.MaxUint32 {
		return 0, &CallError{Func: fn, Return: ErrInvalidArgument}
	}
	return C.uint(link), nil
}

// PCIInfo calls nvmlDeviceGetPciInfo_v3.
func (d *device) PCIInfo() (PCIInfo, error) {
	const fn = "nvmlDeviceGetPciInfo_v3"
	if err := d.lock(fn); err != nil {
		return PCIInfo{}, err
	}
	defer d.unlock()
	var pci C.nvmlPciInfo_t
	if r := Return(C.mk_nvml_device_get_pci_info(&d.lib.sym, d.handle, &pci)); r != Success {
		return PCIInfo{}, d.lib.callError(fn, r)
	}
	return goPCIInfo(&pci), nil
}

// NVLinkActive calls nvmlDeviceGetNvLinkState.
func (d *device) NVLinkActive(link int) (bool, error) {
	const fn = "nvmlDeviceGetNvLinkState"
	l, err := cLink(fn, link)
	if err != nil {
		return false, err
	}
	if err := d.lock(fn); err != nil {
		return false, err
	}
	defer d.unlock()
	var state C.int // nvmlEnableState_t: NVML_FEATURE_ENABLED is 1
	if r := Return(C.mk_nvml_device_get_nvlink_state(&d.lib.sym, d.handle, l, &state)); r != Success {
		return false, d.lib.callError(fn, r)
	}
	return state == 1, nil
}

// NVLinkRemoteDeviceType calls nvmlDeviceGetNvLinkRemoteDeviceType.
func (d *device) NVLinkRemoteDeviceType(link int) (NVLinkDeviceType, error) {
	const fn = "nvmlDeviceGetNvLinkRemoteDeviceType"
	l, err := cLink(fn, link)
	if err != nil {
		return NVLinkDeviceTypeUnknown, err
	}
	if err := d.lock(fn); err != nil {
		return NVLinkDeviceTypeUnknown, err
	}
	defer d.unlock()
	var kind C.int
	if r := Return(C.mk_nvml_device_get_nvlink_remote_device_type(&d.lib.sym, d.handle, l, &kind)); r != Success {
		return NVLinkDeviceTypeUnknown, d.lib.callError(fn, r)
	}
	return NVLinkDeviceType(kind), nil
}

// NVLinkRemotePCIInfo calls nvmlDeviceGetNvLinkRemotePciInfo_v2.
func (d *device) NVLinkRemotePCIInfo(link int) (PCIInfo, error) {
	const fn = "nvmlDeviceGetNvLinkRemotePciInfo_v2"
	l, err := cLink(fn, link)
	if err != nil {
		return PCIInfo{}, err
	}
	if err := d.lock(fn); err != nil {
		return PCIInfo{}, err
	}
	defer d.unlock()
	var pci C.nvmlPciInfo_t
	if r := Return(C.mk_nvml_device_get_nvlink_remote_pci_info(&d.lib.sym, d.handle, l, &pci)); r != Success {
		return PCIInfo{}, d.lib.callError(fn, r)
	}
	return goPCIInfo(&pci), nil
}

// P2PStatus calls nvmlDeviceGetP2PStatus. peer must be a Device of the same
// Library.
func (d *device) P2PStatus(peer Device, index P2PCapsIndex) (P2PStatus, error) {
	const fn = "nvmlDeviceGetP2PStatus"
	p, ok := peer.(*device)
	if !ok || p.lib != d.lib || p.gen != d.gen {
		return P2PStatusUnknown, &CallError{Func: fn, Return: ErrInvalidArgument}
	}
	if err := d.lock(fn); err != nil {
		return P2PStatusUnknown, err
	}
	defer d.unlock()
	var status C.int
	if r := Return(C.mk_nvml_device_get_p2p_status(&d.lib.sym, d.handle, p.handle, C.int(index), &status)); r != Success {
		return P2PStatusUnknown, d.lib.callError(fn, r)
	}
	return P2PStatus(status), nil
}

func goPCIInfo(p *C.nvmlPciInfo_t) PCIInfo {
	return PCIInfo{
		BusID:          C.GoString(&p.busId[0]),
		Domain:         uint32(p.domain),
		Bus:            uint32(p.bus),
		Device:         uint32(p.device),
		PCIDeviceID:    uint32(p.pciDeviceId),
		PCISubSystemID: uint32(p.pciSubSystemId),
	}
}
