package nvml

// DefaultLibrary is the soname the NVIDIA driver installs NVML under.
const DefaultLibrary = "libnvidia-ml.so.1"

// MaxNVLinks bounds NVLink numbers: links are 0 to MaxNVLinks-1. It is
// NVML_NVLINK_MAX_LINKS of nvml.h 13.4.92 (CUDA 13.0's nvml.h still says
// 18). Drivers answer ErrInvalidArgument for links past a GPU's last one, so
// loops over links stop there and the larger bound is safe.
const MaxNVLinks = 36

// Interface is the NVML library: [*Library], or a fake in tests.
type Interface interface {
	// Init loads and initializes NVML. Every successful Init must be
	// matched by one Shutdown.
	Init() error
	// Shutdown undoes one successful Init; the last one closes NVML.
	Shutdown() error
	// DeviceCount returns the number of GPUs NVML can see.
	DeviceCount() (int, error)
	// DeviceByIndex returns GPU index, 0 to DeviceCount()-1 (NVML's
	// order, which need not be CUDA's).
	DeviceByIndex(index int) (Device, error)
	// DeviceByPCIBusID returns the GPU at busID, in sysfs
	// ("0000:1b:00.0") or NVML ("00000000:1B:00.0") form.
	DeviceByPCIBusID(busID string) (Device, error)
}

// Device is one GPU. A Device is valid from the Init that produced it until
// the Shutdown that closes NVML.
type Device interface {
	// PCIInfo returns the GPU's own PCI location.
	PCIInfo() (PCIInfo, error)
	// NVLinkActive reports whether NVLink link is up. It fails with
	// ErrNotSupported on GPUs without NVLink and ErrInvalidArgument for a
	// link past the GPU's last one.
	NVLinkActive(link int) (bool, error)
	// NVLinkRemoteDeviceType says what is at the far end of link.
	NVLinkRemoteDeviceType(link int) (NVLinkDeviceType, error)
	// NVLinkRemotePCIInfo returns the PCI location of the far end of link
	// (PCISubSystemID is not filled in).
	NVLinkRemotePCIInfo(link int) (PCIInfo, error)
	// P2PStatus says whether the GPU can reach peer with the capability
	// index, e.g. P2PCapsIndexNVLink. peer must come from the same
	// Interface.
	P2PStatus(peer Device, index P2PCapsIndex) (P2PStatus, error)
}

// PCIInfo is nvmlPciInfo_t, with the bus ID as a Go string.
type PCIInfo struct {
	// BusID is NVML's form, "00000000:1B:00.0".
	BusID          string
	Domain         uint32
	Bus            uint32
	Device         uint32
	PCIDeviceID    uint32 // device ID << 16 | vendor ID
	PCISubSystemID uint32
}

// NVLinkDeviceType is nvmlIntNvLinkDeviceType_t.
type NVLinkDeviceType int32

// What can be at the far end of an NVLink.
const (
	NVLinkDeviceTypeGPU     NVLinkDeviceType = 0x00
	NVLinkDeviceTypeIBMNPU  NVLinkDeviceType = 0x01
	NVLinkDeviceTypeSwitch  NVLinkDeviceType = 0x02
	NVLinkDeviceTypeUnknown NVLinkDeviceType = 0xff
)

// P2PCapsIndex is nvmlGpuP2PCapsIndex_t: which kind of peer access
// P2PStatus asks about.
type P2PCapsIndex int32

// Peer access kinds.
const (
	P2PCapsIndexRead    P2PCapsIndex = 0
	P2PCapsIndexWrite   P2PCapsIndex = 1
	P2PCapsIndexNVLink  P2PCapsIndex = 2
	P2PCapsIndexAtomics P2PCapsIndex = 3
	P2PCapsIndexPCI     P2PCapsIndex = 4
)

// P2PStatus is nvmlGpuP2PStatus_t.
type P2PStatus int32

// P2PStatusOK means the peer access works; every other value says why not.
const (
	P2PStatusOK                      P2PStatus = 0
	P2PStatusChipsetNotSupported     P2PStatus = 1
	P2PStatusGPUNotSupported         P2PStatus = 2
	P2PStatusIOHTopologyNotSupported P2PStatus = 3
	P2PStatusDisabledByRegkey        P2PStatus = 4
	P2PStatusNotSupported            P2PStatus = 5
	P2PStatusUnknown                 P2PStatus = 6
)

var _ Interface = (*Library)(nil)
