// Package topology discovers the GPU, NIC, PCIe and NUMA layout of one host
// and decides, for every local GPU, which RDMA NIC(s) and which proxy CPU
// cores it should use.
//
// Discovery reads sysfs (default "/sys"; tests point [WithSysfsRoot] at the
// fake trees under testdata/sysfs):
//
//   - GPUs: NVIDIA PCI functions (vendor 0x10de, class 0x0300xx VGA or
//     0x0302xx 3D controller) under bus/pci/devices, with their NUMA node,
//     local_cpulist and PCI path (host bridge, bridges, device).
//   - RDMA NICs: class/infiniband/<dev>, with per-port state, physical state,
//     link layer and rate, the backing PCI device and its NUMA node. EFA
//     devices (driver efa, names efa*/rdmap*) have kind "efa", the rest
//     "ibverbs".
//   - NUMA nodes (devices/system/node/node*/cpulist) and online CPUs
//     (devices/system/cpu/online).
//
// NVLink peers come from an [NVLinkProber]. The default, [NVMLProber], loads
// libnvidia-ml.so.1 only when asked and reports [ErrNotSupported] where the
// library or driver is missing; Discover then records NVLink as unknown
// (Topology.NVLinkKnown false), never as "no NVLink".
//
// [Place] ranks NICs per GPU by PCIe locality with the nvidia-smi topology
// classes (PIX, PXB, PHB, NODE, SYS), preferring ports that are ACTIVE, gives
// each GPU len(NICs)/len(GPUs) distinct NICs where it can (one per GPU on an
// 8×ConnectX-7 node, two on a node with 16 EFA devices), and picks proxy CPUs
// from the end of the GPU's NUMA node cpulist, distinct per GPU where the node
// has enough. The result is deterministic for a given tree.
//
// Every type marshals to JSON with snake_case names; Python's
// mkernel.topology() and the C ABI hand that JSON through unchanged. CPU lists
// of whole nodes or devices are kernel cpulist strings ("0-55,112-167", see
// [CPUList]); proxy CPUs are JSON arrays of integers.
package topology
