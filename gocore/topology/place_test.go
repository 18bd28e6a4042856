package topology_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mkernel/mkernel/gocore/topology"
)

// checkInvariants checks what must hold for every placement of a host with
// enough NICs and CPUs: NICs distinct and ACTIVE, proxy CPUs distinct, never
// CPU 0, on the GPU's NUMA node.
func checkInvariants(t *testing.T, topo *topology.Topology, ps []topology.Placement, nicsPerGPU int) {
	t.Helper()
	nicUsed := map[string]int{}
	cpuUsed := map[int]int{}
	for i, p := range ps {
		g := topo.GPUs[i]
		if p.GPU != g.Index || p.GPUBusID != g.BusID || p.NUMANode != g.NUMANode {
			t.Errorf("placement %d is for GPU %d %s node %d, want %d %s node %d", i, p.GPU, p.GPUBusID, p.NUMANode, g.Index, g.BusID, g.NUMANode)
		}
		if len(p.NICs) != nicsPerGPU {
			t.Errorf("GPU %d: %d NICs, want %d", p.GPU, len(p.NICs), nicsPerGPU)
		}
		for _, n := range p.NICs {
			if prev, ok := nicUsed[n.Name]; ok {
				t.Errorf("NIC %s given to GPU %d and GPU %d", n.Name, prev, p.GPU)
			}
			nicUsed[n.Name] = p.GPU
			if !n.Active || n.Port != 1 {
				t.Errorf("GPU %d: NIC %+v, want ACTIVE port 1", p.GPU, n)
			}
		}
		if len(p.ProxyCPUs) != topology.DefaultProxyCPUsPerGPU {
			t.Errorf("GPU %d: proxy CPUs %v", p.GPU, p.ProxyCPUs)
		}
		node := topo.NUMANodes[g.NUMANode].CPUs
		for _, c := range p.ProxyCPUs {
			if prev, ok := cpuUsed[c]; ok {
				t.Errorf("CPU %d given to GPU %d and GPU %d", c, prev, p.GPU)
			}
			cpuUsed[c] = p.GPU
			if c == 0 || !node.Contains(c) {
				t.Errorf("GPU %d: proxy CPU %d is CPU 0 or off node %d", p.GPU, c, g.NUMANode)
			}
		}
		if p.Reason != "" {
			t.Errorf("GPU %d: reason %q, want none", p.GPU, p.Reason)
		}
	}
}

func TestPlaceDGX(t *testing.T) {
	topo := mustDiscover(t, "dgx-h200", nil)
	checkInvariants(t, topo, topo.Placements, 1)
	for i, p := range topo.Placements {
		// Each GPU's ConnectX-7 is the one under its own PCIe switch.
		nic := topo.NICs[slices.IndexFunc(topo.NICs, func(n topology.NIC) bool { return n.Name == p.NICs[0].Name })]
		if p.NICs[0].Locality != topology.LocalityPIX || nic.PCIPath[2] != topo.GPUs[i].PCIPath[2] {
			t.Errorf("GPU %d got %+v, want the NIC on its switch", i, p.NICs[0])
		}
	}
	// From the end of the node's cpulist.
	if diff := cmp.Diff([]int{166, 167}, topo.Placements[0].ProxyCPUs); diff != "" {
		t.Errorf("GPU 0 proxy CPUs (-want +got):\n%s", diff)
	}
}

func TestPlaceP5(t *testing.T) {
	topo := mustDiscover(t, "p5-efa", nil)
	// 16 EFA devices for 8 GPUs: two each, all 16 used.
	checkInvariants(t, topo, topo.Placements, 2)
	for _, p := range topo.Placements {
		for _, n := range p.NICs {
			if n.Kind != topology.KindEFA || n.Locality != topology.LocalityPIX {
				t.Errorf("GPU %d: %+v, want an EFA device on its switch", p.GPU, n)
			}
		}
	}

	one, err := topology.Place(topo, topology.WithNICsPerGPU(1))
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, topo, one, 1)
	if one[0].NICs[0].Name != "rdmap79s0" {
		t.Errorf("GPU 0 with one NIC: %s, want rdmap79s0 (first of its two by name)", one[0].NICs[0].Name)
	}
}

func TestPlaceLaptop(t *testing.T) {
	topo := mustDiscover(t, "laptop", nil)
	want := []topology.Placement{{
		GPU: 0, GPUBusID: "0000:01:00.0",
		NUMANode:  0, // numa_node says -1, but there is only node 0
		NICs:      []topology.NICChoice{},
		ProxyCPUs: []int{14, 15},
		Reason:    "no RDMA NIC found",
	}}
	if diff := cmp.Diff(want, topo.Placements); diff != "" {
		t.Errorf("laptop placement (-want +got):\n%s", diff)
	}
}

// setState sets the logical state of every port of the named NICs.
func setState(topo *topology.Topology, state string, names ...string) {
	for i := range topo.NICs {
		if slices.Contains(names, topo.NICs[i].Name) {
			for j := range topo.NICs[i].Ports {
				topo.NICs[i].Ports[j].State = state
			}
		}
	}
}

func TestPlaceDownPortPreferredLess(t *testing.T) {
	t.Run("from sysfs", func(t *testing.T) {
		root := copyTree(t, "dgx-h200")
		writeFile(t, root, "class/infiniband/mlx5_0/ports/1/state", "1: DOWN")
		writeFile(t, root, "class/infiniband/mlx5_0/ports/1/phys_state", "3: Disabled")
		topo, err := discoverAt(t, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := topo.NICs[0].Ports[0]; got.State != "DOWN" || got.PhysState != "Disabled" || topo.NICs[0].Active() {
			t.Fatalf("mlx5_0 port = %+v, want DOWN/Disabled", got)
		}
		for _, p := range topo.Placements {
			if p.NICs[0].Name == "mlx5_0" {
				t.Errorf("GPU %d placed on DOWN mlx5_0", p.GPU)
			}
		}
		// GPU 0 shares an ACTIVE NIC on its own NUMA node instead.
		p0 := topo.Placements[0]
		if n := p0.NICs[0]; !n.Active || n.Name != "mlx5_1" || n.Locality != topology.LocalityNode {
			t.Errorf("GPU 0 got %+v, want ACTIVE mlx5_1 (NODE)", n)
		}
		if !strings.Contains(p0.Reason, "NIC mlx5_1 shared with GPU 1") {
			t.Errorf("GPU 0 reason %q", p0.Reason)
		}
	})
	t.Run("all down", func(t *testing.T) {
		topo := mustDiscover(t, "dgx-h200", nil)
		setState(topo, "DOWN", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7")
		ps, err := topology.Place(topo)
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range ps {
			// Locality still decides.
			if n := p.NICs[0]; n.Active || n.Locality != topology.LocalityPIX || n.Name != topo.NICs[i].Name {
				t.Errorf("GPU %d got %+v, want its own switch's NIC, not active", i, n)
			}
			if !strings.Contains(p.Reason, "no NIC port is ACTIVE") {
				t.Errorf("GPU %d reason %q", i, p.Reason)
			}
		}
	})
	t.Run("second port active", func(t *testing.T) {
		topo := mustDiscover(t, "dgx-h200", nil)
		nic := &topo.NICs[2]
		nic.Ports = append(nic.Ports, nic.Ports[0])
		nic.Ports[0].State, nic.Ports[1].Port = "DOWN", 2
		ps, err := topology.Place(topo)
		if err != nil {
			t.Fatal(err)
		}
		if n := ps[2].NICs[0]; n.Name != "mlx5_2" || n.Port != 2 || !n.Active {
			t.Errorf("GPU 2 got %+v, want mlx5_2 port 2", n)
		}
	})
}

func TestPlaceFewerNICsThanGPUs(t *testing.T) {
	topo := mustDiscover(t, "dgx-h200", nil)
	topo.NICs = topo.NICs[:4] // mlx5_0..3, all on node 0
	ps, err := topology.Place(topo)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		want := topo.NICs[i%4].Name
		if len(p.NICs) != 1 || p.NICs[0].Name != want {
			t.Errorf("GPU %d got %+v, want %s", i, p.NICs, want)
		}
		if i < 4 && p.NICs[0].Locality != topology.LocalityPIX {
			t.Errorf("GPU %d: %s, want PIX", i, p.NICs[0].Locality)
		}
		if i >= 4 && (p.NICs[0].Locality != topology.LocalitySys || !strings.Contains(p.Reason, "another NUMA node")) {
			t.Errorf("GPU %d: %s, reason %q; want SYS and a reason", i, p.NICs[0].Locality, p.Reason)
		}
		if !strings.Contains(p.Reason, "shared with GPU") {
			t.Errorf("GPU %d reason %q, want a sharing note", i, p.Reason)
		}
	}
}

func TestPlaceMoreNICsPerGPUThanNICs(t *testing.T) {
	topo := mustDiscover(t, "dgx-h200", nil)
	ps, err := topology.Place(topo, topology.WithNICsPerGPU(3))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range ps {
		if len(p.NICs) != 3 || p.NICs[0].Name != topo.NICs[i].Name {
			t.Errorf("GPU %d got %+v, want 3 NICs, its own first", i, p.NICs)
		}
		for _, n := range p.NICs[1:] {
			if n.Locality != topology.LocalityNode {
				t.Errorf("GPU %d: extra NIC %+v, want one on its NUMA node", i, n)
			}
		}
	}
	ps, err = topology.Place(topo, topology.WithNICsPerGPU(100))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps[0].NICs) != 8 {
		t.Errorf("100 NICs per GPU: got %d, want all 8", len(ps[0].NICs))
	}
}

func TestPlaceDeterministic(t *testing.T) {
	for _, m := range machines {
		topo := mustDiscover(t, m.name, nil)
		slices.Reverse(topo.NICs)
		ps, err := topology.Place(topo)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(topo.Placements, ps); diff != "" {
			t.Errorf("%s: Place depends on NIC order (-sorted +reversed):\n%s", m.name, diff)
		}
	}
}

func TestPlaceProxyCPUs(t *testing.T) {
	t.Run("shared when the node is small", func(t *testing.T) {
		topo := &topology.Topology{
			OnlineCPUs: topology.CPUList{0, 1, 2, 3},
			NUMANodes:  []topology.NUMANode{{ID: 0, CPUs: topology.CPUList{0, 1, 2, 3}}},
		}
		for i := range 3 {
			topo.GPUs = append(topo.GPUs, topology.GPU{Index: i, NUMANode: 0})
		}
		ps, err := topology.Place(topo)
		if err != nil {
			t.Fatal(err)
		}
		// CPU 0 is left out; 3, 2, 1 go round.
		got := [][]int{ps[0].ProxyCPUs, ps[1].ProxyCPUs, ps[2].ProxyCPUs}
		if diff := cmp.Diff([][]int{{2, 3}, {1, 3}, {1, 2}}, got); diff != "" {
			t.Errorf("proxy CPUs (-want +got):\n%s", diff)
		}
		if !strings.Contains(ps[0].Reason, "no RDMA NIC") || strings.Contains(ps[0].Reason, "shared") {
			t.Errorf("GPU 0 reason %q", ps[0].Reason)
		}
		if !strings.Contains(ps[1].Reason, "proxy CPUs shared with GPU 0") || !strings.Contains(ps[2].Reason, "shared with GPU 0,1") {
			t.Errorf("reasons %q, %q", ps[1].Reason, ps[2].Reason)
		}
	})
	t.Run("single CPU", func(t *testing.T) {
		topo := &topology.Topology{OnlineCPUs: topology.CPUList{0}, GPUs: []topology.GPU{{NUMANode: -1}}}
		ps, err := topology.Place(topo)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int{0}, ps[0].ProxyCPUs); diff != "" || !strings.Contains(ps[0].Reason, "all online CPUs") {
			t.Errorf("proxy CPUs %v, reason %q", ps[0].ProxyCPUs, ps[0].Reason)
		}
	})
	t.Run("offline CPUs skipped", func(t *testing.T) {
		topo := mustDiscover(t, "dgx-h200", nil)
		topo.OnlineCPUs, _ = topology.ParseCPUList("0-165")
		ps, err := topology.Place(topo)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int{164, 165}, ps[0].ProxyCPUs); diff != "" {
			t.Errorf("GPU 0 proxy CPUs (-want +got):\n%s", diff)
		}
	})
	t.Run("none", func(t *testing.T) {
		topo := mustDiscover(t, "dgx-h200", nil)
		ps, err := topology.Place(topo, topology.WithProxyCPUsPerGPU(0))
		if err != nil {
			t.Fatal(err)
		}
		if ps[0].ProxyCPUs == nil || len(ps[0].ProxyCPUs) != 0 {
			t.Errorf("proxy CPUs %#v, want []", ps[0].ProxyCPUs)
		}
	})
}

func TestPlaceErrors(t *testing.T) {
	if _, err := topology.Place(nil); err == nil {
		t.Error("Place(nil): want an error")
	}
	topo := mustDiscover(t, "laptop", nil)
	for _, opt := range []topology.PlaceOption{topology.WithNICsPerGPU(-1), topology.WithProxyCPUsPerGPU(-2)} {
		if _, err := topology.Place(topo, opt); err == nil {
			t.Error("Place with a negative count: want an error")
		}
	}
	if _, err := discoverAt(t, sysfsRoot("laptop"), nil, topology.WithPlaceOptions(topology.WithNICsPerGPU(-1))); err == nil {
		t.Error("Discover with a bad place option: want an error")
	}
	// No GPUs: no placements, no error.
	ps, err := topology.Place(&topology.Topology{})
	if err != nil || len(ps) != 0 {
		t.Errorf("Place(empty) = %v, %v", ps, err)
	}
}

func TestFirstNIC(t *testing.T) {
	var none *topology.Placement
	if _, ok := none.FirstNIC(topology.KindEFA); ok {
		t.Error("a nil placement has a NIC")
	}
	p := &topology.Placement{NICs: []topology.NICChoice{
		{Name: "mlx5_0", Kind: topology.KindIBVerbs}, {Name: "rdmap0", Port: 1, Kind: topology.KindEFA}, {Name: "rdmap1", Kind: topology.KindEFA},
	}}
	if n, ok := p.FirstNIC(topology.KindEFA); !ok || n.Name != "rdmap0" {
		t.Errorf("FirstNIC(efa) = %+v, %v", n, ok)
	}
	if n, ok := p.FirstNIC(topology.KindIBVerbs); !ok || n.Name != "mlx5_0" {
		t.Errorf("FirstNIC(ibverbs) = %+v, %v", n, ok)
	}
	p.NICs = p.NICs[1:]
	if _, ok := p.FirstNIC(topology.KindIBVerbs); ok {
		t.Error("FirstNIC(ibverbs) found one among EFA NICs")
	}
}

func TestNICsOfKind(t *testing.T) {
	active, down, err := topology.NICsOfKind(sysfsRoot("p5-efa"), topology.KindEFA)
	if err != nil || len(active) != 16 || len(down) != 0 || active[0] != "rdmap79s0" {
		t.Errorf("p5 EFA devices: %v, %v, %v", active, down, err)
	}
	if active, down, err := topology.NICsOfKind(sysfsRoot("p5-efa"), topology.KindIBVerbs); err != nil || len(active)+len(down) != 0 {
		t.Errorf("p5 ibverbs NICs: %v, %v, %v", active, down, err)
	}
	root := copyTree(t, "dgx-h200")
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/mlx5_3/ports/1/state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	active, down, err = topology.NICsOfKind(root, topology.KindIBVerbs)
	if err != nil || len(active) != 7 || !slices.Equal(down, []string{"mlx5_3"}) {
		t.Errorf("DGX with mlx5_3 down: %v, %v, %v", active, down, err)
	}
	if _, _, err := topology.NICsOfKind(filepath.Join(root, "absent"), topology.KindIBVerbs); err == nil || !strings.Contains(err.Error(), "read sysfs") {
		t.Errorf("no sysfs: %v", err)
	}
}
