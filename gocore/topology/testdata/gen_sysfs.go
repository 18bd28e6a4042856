//go:build ignore

// gen_sysfs writes the fake sysfs trees under testdata/sysfs: plain text files
// and relative symlinks, only the files package topology reads.
//
//	cd gocore/topology && go run testdata/gen_sysfs.go
//
// The trees are checked in; this program only makes them easier to change.
// Values follow what the kernel prints (see README.md next to the trees).
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
)

type pciDev struct {
	path      []string // host bridge first, device last
	vendor    string
	device    string
	class     string
	numa      int
	localCPUs string
	driver    string // "" for none
}

func (d pciDev) busID() string { return d.path[len(d.path)-1] }

type ibPort struct {
	state, physState, linkLayer, rate string
}

type ibDev struct {
	name  string
	pci   pciDev
	guid  string
	ports []ibPort
}

type machine struct {
	name   string
	online string
	nodes  []string // cpulist of node0, node1, ...
	pci    []pciDev // GPUs and other PCI functions, not the NICs
	ib     []ibDev  // nil: no class/infiniband at all
}

// switchPath is the PCI path of port `port` of a PCIe switch behind root port
// <root>:01.0 of host bridge pci0000:<root>: root port, switch upstream port
// on bus root+1, downstream ports on bus root+2, port k leading to bus
// root+3+k, device 00.0 there.
func switchPath(root, port int) []string {
	return []string{
		fmt.Sprintf("pci0000:%02x", root),
		fmt.Sprintf("0000:%02x:01.0", root),
		fmt.Sprintf("0000:%02x:00.0", root+1),
		fmt.Sprintf("0000:%02x:%02x.0", root+2, port),
		fmt.Sprintf("0000:%02x:00.0", root+3+port),
	}
}

func dgxH200() machine {
	// 2× Xeon Platinum 8480C: 56 cores each, 2 threads per core.
	nodes := []string{"0-55,112-167", "56-111,168-223"}
	m := machine{name: "dgx-h200", online: "0-223", nodes: nodes}
	// One PCIe switch per GPU/NIC pair: NIC on downstream port 0, GPU on
	// port 3. mlx5_N is named in PCI order.
	for i, root := range []int{0x15, 0x3d, 0x4c, 0x5b, 0x97, 0xbd, 0xcb, 0xd9} {
		node := i / 4
		m.pci = append(m.pci, pciDev{
			path: switchPath(root, 3), vendor: "0x10de", device: "0x2335", class: "0x030200",
			numa: node, localCPUs: nodes[node],
		})
		nic := pciDev{
			path: switchPath(root, 0), vendor: "0x15b3", device: "0x1021", class: "0x020700",
			numa: node, localCPUs: nodes[node], driver: "mlx5_core",
		}
		m.ib = append(m.ib, ibDev{
			name: fmt.Sprintf("mlx5_%d", i), pci: nic, guid: fmt.Sprintf("a088:c203:0031:5f%02x", 0x10*i),
			ports: []ibPort{{"4: ACTIVE", "5: LinkUp", "InfiniBand", "400 Gb/sec (4X NDR)"}},
		})
	}
	// An NVSwitch management function: NVIDIA, but class bridge, not a GPU.
	m.pci = append(m.pci, pciDev{
		path: []string{"pci0000:00", "0000:00:01.1", "0000:05:00.0"}, vendor: "0x10de", device: "0x22a3",
		class: "0x068000", numa: 0, localCPUs: nodes[0],
	})
	return m
}

func p5EFA() machine {
	// 2× AMD EPYC 7R13: 48 cores each, 2 threads per core.
	nodes := []string{"0-47,96-143", "48-95,144-191"}
	m := machine{name: "p5-efa", online: "0-191", nodes: nodes}
	// One PCIe switch per GPU: two EFA devices on downstream ports 1 and 2,
	// the GPU on port 5. EFA devices are named rdmap<bus in decimal>s0.
	for i, root := range []int{0x4b, 0x5c, 0x6d, 0x7e, 0x8f, 0xa0, 0xb1, 0xc2} {
		node := i / 4
		m.pci = append(m.pci, pciDev{
			path: switchPath(root, 5), vendor: "0x10de", device: "0x2330", class: "0x030200",
			numa: node, localCPUs: nodes[node],
		})
		for _, port := range []int{1, 2} {
			efa := pciDev{
				path: switchPath(root, port), vendor: "0x1d0f", device: "0xefa1", class: "0x020000",
				numa: node, localCPUs: nodes[node], driver: "efa",
			}
			m.ib = append(m.ib, ibDev{
				name: fmt.Sprintf("rdmap%ds0", root+3+port), pci: efa, guid: "0000:0000:0000:0000",
				// efa_query_port: always ACTIVE/LinkUp, 4X EDR; no
				// get_link_layer answer, so sysfs says "Unknown".
				ports: []ibPort{{"4: ACTIVE", "5: LinkUp", "Unknown", "100 Gb/sec (4X EDR)"}},
			})
		}
	}
	return m
}

func laptop() machine {
	m := machine{name: "laptop", online: "0-15", nodes: []string{"0-15"}}
	m.pci = []pciDev{
		// Intel iGPU: a VGA controller, but not NVIDIA.
		{path: []string{"pci0000:00", "0000:00:02.0"}, vendor: "0x8086", device: "0xa7a0", class: "0x030000",
			numa: -1, localCPUs: "0-15"},
		// The NVIDIA GPU, a VGA controller, and its HDMI audio function.
		{path: []string{"pci0000:00", "0000:00:01.0", "0000:01:00.0"}, vendor: "0x10de", device: "0x2820",
			class: "0x030000", numa: -1, localCPUs: "0-15"},
		{path: []string{"pci0000:00", "0000:00:01.0", "0000:01:00.1"}, vendor: "0x10de", device: "0x22bd",
			class: "0x040300", numa: -1, localCPUs: "0-15"},
	}
	return m
}

func main() {
	out := flag.String("out", "testdata/sysfs", "directory to write the machines into")
	flag.Parse()
	for _, m := range []machine{dgxH200(), p5EFA(), laptop()} {
		if err := write(filepath.Join(*out, m.name), m); err != nil {
			log.Fatalf("%s: %v", m.name, err)
		}
	}
}

func write(root string, m machine) error {
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	w := writer{root: root}
	w.file("devices/system/cpu/online", m.online)
	for i, cpus := range m.nodes {
		w.file(fmt.Sprintf("devices/system/node/node%d/cpulist", i), cpus)
	}
	devs := m.pci
	for _, ib := range m.ib {
		devs = append(devs, ib.pci)
	}
	nics := make(map[string]bool)
	for _, ib := range m.ib {
		nics[ib.pci.busID()] = true
	}
	// Only what the package reads: vendor of every function, class of
	// NVIDIA ones, device/numa_node/local_cpulist of GPUs, numa_node and
	// driver of NICs.
	for _, d := range devs {
		dir := "devices/" + strings.Join(d.path, "/")
		nvidia := d.vendor == "0x10de"
		gpu := nvidia && (strings.HasPrefix(d.class, "0x0300") || strings.HasPrefix(d.class, "0x0302"))
		w.file(dir+"/vendor", d.vendor)
		if nvidia {
			w.file(dir+"/class", d.class)
		}
		if gpu {
			w.file(dir+"/device", d.device)
			w.file(dir+"/local_cpulist", d.localCPUs)
		}
		if gpu || nics[d.busID()] {
			w.file(dir+"/numa_node", fmt.Sprint(d.numa))
		}
		if d.driver != "" {
			w.link(dir+"/driver", "bus/pci/drivers/"+d.driver)
		}
		w.link("bus/pci/devices/"+d.busID(), dir)
	}
	for _, ib := range m.ib {
		pciDir := "devices/" + strings.Join(ib.pci.path, "/")
		dir := pciDir + "/infiniband/" + ib.name
		w.file(dir+"/node_guid", ib.guid)
		// As the kernel writes it: up from infiniband/<name>, back down.
		w.rawLink(dir+"/device", "../../../"+ib.pci.busID())
		for i, p := range ib.ports {
			port := fmt.Sprintf("%s/ports/%d/", dir, i+1)
			w.file(port+"state", p.state)
			w.file(port+"phys_state", p.physState)
			w.file(port+"link_layer", p.linkLayer)
			w.file(port+"rate", p.rate)
		}
		w.link("class/infiniband/"+ib.name, dir)
	}
	return w.err
}

type writer struct {
	root string
	err  error
}

// file writes content and a newline, as sysfs does.
func (w *writer) file(rel, content string) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, rel)
	if w.err = os.MkdirAll(filepath.Dir(p), 0o755); w.err != nil {
		return
	}
	w.err = os.WriteFile(p, []byte(content+"\n"), 0o644)
}

// rawLink makes rel a symlink with the literal target.
func (w *writer) rawLink(rel, target string) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, rel)
	if w.err = os.MkdirAll(filepath.Dir(p), 0o755); w.err != nil {
		return
	}
	w.err = os.Symlink(target, p)
}

// link makes rel a relative symlink to target; both are relative to the root.
func (w *writer) link(rel, target string) {
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, rel)
	if w.err = os.MkdirAll(filepath.Dir(p), 0o755); w.err != nil {
		return
	}
	var to string
	if to, w.err = filepath.Rel(filepath.Dir(p), filepath.Join(w.root, target)); w.err != nil {
		return
	}
	w.err = os.Symlink(to, p)
}
