package topology

// Topology is what Discover found on one host. Its own slices are never nil,
// so they marshal as [] rather than null.
type Topology struct {
	Hostname string `json:"hostname"`
	// OnlineCPUs is devices/system/cpu/online.
	OnlineCPUs CPUList `json:"online_cpus"`
	// NUMANodes is sorted by ID; empty on kernels built without NUMA.
	NUMANodes []NUMANode `json:"numa_nodes"`
	// GPUs is sorted by PCI bus ID, the order nvidia-smi and
	// CUDA_DEVICE_ORDER=PCI_BUS_ID use; GPU.Index is the position here.
	GPUs []GPU `json:"gpus"`
	// NICs is sorted by name, numbers compared as numbers (mlx5_2 < mlx5_10).
	NICs []NIC `json:"nics"`
	// NVLinkKnown is true when an NVLinkProber answered for the GPUs; then
	// every GPU.NVLinkPeers is a list, possibly empty. When false, NVLink
	// peers are unknown (no NVML, or no GPUs to ask about) and
	// GPU.NVLinkPeers is null.
	NVLinkKnown bool `json:"nvlink_known"`
	// Placements has one entry per GPU, in GPU order; see Place.
	Placements []Placement `json:"placements"`
	// Warnings are problems that did not stop discovery, e.g. why NVLink
	// is unknown.
	Warnings []string `json:"warnings"`
}

// NUMANode is one node of devices/system/node.
type NUMANode struct {
	ID int `json:"id"`
	// CPUs may be empty: memory-only nodes (CXL, HBM, GPU memory) have none.
	CPUs CPUList `json:"cpus"`
}

// GPU is one NVIDIA PCI function of class VGA or 3D controller.
type GPU struct {
	// Index is the position in Topology.GPUs (PCI bus order).
	Index int `json:"index"`
	// BusID is the sysfs PCI address, "0000:18:00.0".
	BusID string `json:"bus_id"`
	// DeviceID is the PCI device ID, e.g. "0x2335" (H200 SXM).
	DeviceID string `json:"device_id"`
	// NUMANode is -1 when the kernel does not know.
	NUMANode int `json:"numa_node"`
	// LocalCPUs is the device's local_cpulist.
	LocalCPUs CPUList `json:"local_cpus"`
	// PCIPath is the chain from the host bridge down to the device, e.g.
	// ["pci0000:17", "0000:17:00.0", "0000:18:00.0"].
	PCIPath []string `json:"pci_path"`
	// NVLinkPeers are the bus IDs of GPUs reachable over NVLink (directly or
	// through NVSwitch), sorted; null when Topology.NVLinkKnown is false.
	NVLinkPeers []string `json:"nvlink_peers"`
}

// NICKind says which transport backend drives a NIC.
type NICKind string

const (
	// KindIBVerbs is a verbs device used with RC queue pairs (ConnectX over
	// InfiniBand or RoCE).
	KindIBVerbs NICKind = "ibverbs"
	// KindEFA is an AWS Elastic Fabric Adapter, used with SRD through efadv.
	KindEFA NICKind = "efa"
)

// NIC is one RDMA device of class/infiniband.
type NIC struct {
	// Name is the verbs device name: "mlx5_0", "rdmap79s0".
	Name string  `json:"name"`
	Kind NICKind `json:"kind"`
	// Driver is the PCI driver ("mlx5_core", "efa"); empty for software
	// devices (rxe, siw) that have no PCI function.
	Driver string `json:"driver"`
	// BusID is the backing PCI function; empty for software devices.
	BusID string `json:"bus_id"`
	// NUMANode is -1 when unknown.
	NUMANode int `json:"numa_node"`
	// PCIPath is as in GPU.PCIPath; null for software devices.
	PCIPath []string `json:"pci_path"`
	// NodeGUID is node_guid as the kernel prints it, "a088:c203:0031:5f00".
	NodeGUID string `json:"node_guid"`
	// Ports is sorted by port number.
	Ports []Port `json:"ports"`
}

// Port is one port of a NIC (ports/<n>).
type Port struct {
	// Port is the port number, from 1.
	Port int `json:"port"`
	// State is the logical state without its number: "ACTIVE", "DOWN",
	// "INIT", "ARMED".
	State string `json:"state"`
	// PhysState is the physical state without its number: "LinkUp",
	// "Disabled", "Polling".
	PhysState string `json:"phys_state"`
	// LinkLayer is "InfiniBand", "Ethernet" (RoCE) or "Unknown" (EFA).
	LinkLayer string `json:"link_layer"`
	// Rate is the raw rate, "400 Gb/sec (4X NDR)".
	Rate string `json:"rate"`
	// RateGbps is Rate's number in Gbit/s.
	RateGbps float64 `json:"rate_gbps"`
}

// PortStateActive is the State of a port that can carry traffic.
const PortStateActive = "ACTIVE"

// Active reports whether the port's logical state is ACTIVE.
func (p Port) Active() bool { return p.State == PortStateActive }

// Active reports whether any port of n is ACTIVE.
func (n NIC) Active() bool {
	for _, p := range n.Ports {
		if p.Active() {
			return true
		}
	}
	return false
}

// Locality classifies the PCIe path between a GPU and a NIC. The names and
// meanings are those of `nvidia-smi topo -m`, best first.
type Locality string

const (
	// LocalityPIX: at most one PCIe switch between them.
	LocalityPIX Locality = "PIX"
	// LocalityPXB: several PCIe switches, without the host bridge.
	LocalityPXB Locality = "PXB"
	// LocalityPHB: through a PCIe host bridge (same root complex).
	LocalityPHB Locality = "PHB"
	// LocalityNode: across host bridges within one NUMA node.
	LocalityNode Locality = "NODE"
	// LocalitySys: across NUMA nodes (the SMP interconnect), or unknown.
	LocalitySys Locality = "SYS"
)

// Placement is the NIC and CPU choice for one GPU.
type Placement struct {
	// GPU is the GPU's Index; GPUBusID its bus ID.
	GPU      int    `json:"gpu"`
	GPUBusID string `json:"gpu_bus_id"`
	// NUMANode is the node the proxy CPUs were taken from: the GPU's, or the
	// only node of a single-node host whose GPU reports -1. -1 if unknown.
	NUMANode int `json:"numa_node"`
	// NICs are the chosen NICs, best first; empty (not null) when the host
	// has no RDMA NIC.
	NICs []NICChoice `json:"nics"`
	// ProxyCPUs are the CPUs for this GPU's proxy threads, ascending.
	ProxyCPUs []int `json:"proxy_cpus"`
	// Reason explains anything short of the ideal (no NIC, NIC shared or
	// not ACTIVE or on another NUMA node, CPUs shared or not NUMA-local);
	// empty when the placement is ideal.
	Reason string `json:"reason"`
}

// FirstNIC returns the best chosen NIC of kind (the first in NICs), false
// when there is none or p is nil.
func (p *Placement) FirstNIC(kind NICKind) (NICChoice, bool) {
	if p == nil {
		return NICChoice{}, false
	}
	for _, n := range p.NICs {
		if n.Kind == kind {
			return n, true
		}
	}
	return NICChoice{}, false
}

// NICChoice is one NIC chosen for a GPU.
type NICChoice struct {
	Name string `json:"name"`
	// Port is the port to use: the first ACTIVE one, else the first one.
	Port int     `json:"port"`
	Kind NICKind `json:"kind"`
	// Locality is the PCIe relation to the GPU.
	Locality Locality `json:"locality"`
	// PCIDistance counts the PCI path elements between GPU and NIC through
	// their closest common ancestor (4 for two endpoints under one PCIe
	// switch); -1 when they share no ancestor or a path is unknown.
	PCIDistance int `json:"pci_distance"`
	// Active is true when Port is ACTIVE.
	Active bool `json:"active"`
}
