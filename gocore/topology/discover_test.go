package topology_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mkernel/mkernel/gocore/topology"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json from the current output")

// machines are the checked-in trees and the NVLink answer each gets.
var machines = []struct {
	name   string
	prober topology.NVLinkProber
}{
	{"dgx-h200", topology.MeshNVLink()}, // HGX: all 8 GPUs on NVSwitch
	{"p5-efa", topology.MeshNVLink()},
	{"laptop", noNVML}, // NVLink unknown, reported as a warning
}

func TestDiscoverGolden(t *testing.T) {
	for _, m := range machines {
		t.Run(m.name, func(t *testing.T) {
			got := mustDiscover(t, m.name, m.prober)
			golden := filepath.Join("testdata", "golden", m.name+".json")
			if *update {
				b, err := json.MarshalIndent(got, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, append(b, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			var want topology.Topology
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("%s: %v", golden, err)
			}
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("Discover(%s) differs from %s (-want +got):\n%s", m.name, golden, diff)
			}
		})
	}
}

// TestDiscoverReal runs on this host's /sys with the real NVML prober. It
// only checks that discovery works wherever the tests run, GPUs or not.
func TestDiscoverReal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("sysfs is Linux only")
	}
	topo, err := topology.Discover(t.Context())
	if err != nil {
		t.Fatalf("Discover on /sys: %v", err)
	}
	b, _ := json.Marshal(topo)
	t.Logf("%s", b)
}

func TestDiscoverDefaultProberOnFakeTree(t *testing.T) {
	// Without WithNVLinkProber, Discover asks NVML about the fake tree's
	// GPUs. Without NVML (or on a host whose GPUs sit elsewhere) that
	// leaves NVLink unknown with a warning; it is never an error.
	topo, err := topology.Discover(t.Context(), topology.WithSysfsRoot(sysfsRoot("dgx-h200")))
	if err != nil {
		t.Fatal(err)
	}
	if !topo.NVLinkKnown && len(topo.Warnings) != 1 {
		t.Errorf("NVLink unknown with warnings %q; want one saying why", topo.Warnings)
	}
	if topo.Hostname == "" {
		t.Error("Hostname is empty; want os.Hostname()")
	}
}

func TestDiscoverDecoys(t *testing.T) {
	// NVSwitch bridge (dgx-h200), Intel iGPU and HDMI audio (laptop) are
	// not GPUs.
	for machine, want := range map[string][]string{
		"dgx-h200": {"0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0", "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"},
		"laptop":   {"0000:01:00.0"},
	} {
		topo := mustDiscover(t, machine, nil)
		var got []string
		for _, g := range topo.GPUs {
			got = append(got, g.BusID)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s GPUs (-want +got):\n%s", machine, diff)
		}
	}
}

func TestDiscoverNICs(t *testing.T) {
	p5 := mustDiscover(t, "p5-efa", nil)
	if len(p5.NICs) != 16 {
		t.Fatalf("p5-efa: %d NICs, want 16", len(p5.NICs))
	}
	for _, n := range p5.NICs {
		if n.Kind != topology.KindEFA || n.Driver != "efa" || !n.Active() || n.Ports[0].RateGbps != 100 {
			t.Errorf("p5-efa NIC %+v: want an ACTIVE 100 Gb/s efa device", n)
		}
	}
	if p5.NICs[0].Name != "rdmap79s0" || p5.NICs[15].Name != "rdmap199s0" {
		t.Errorf("p5-efa NICs not in natural order: first %s, last %s", p5.NICs[0].Name, p5.NICs[15].Name)
	}
	dgx := mustDiscover(t, "dgx-h200", nil)
	want := topology.NIC{
		Name: "mlx5_0", Kind: topology.KindIBVerbs, Driver: "mlx5_core", BusID: "0000:18:00.0", NUMANode: 0,
		PCIPath:  []string{"pci0000:15", "0000:15:01.0", "0000:16:00.0", "0000:17:00.0", "0000:18:00.0"},
		NodeGUID: "a088:c203:0031:5f00",
		Ports: []topology.Port{{
			Port: 1, State: "ACTIVE", PhysState: "LinkUp", LinkLayer: "InfiniBand",
			Rate: "400 Gb/sec (4X NDR)", RateGbps: 400,
		}},
	}
	if diff := cmp.Diff(want, dgx.NICs[0]); diff != "" {
		t.Errorf("dgx-h200 mlx5_0 (-want +got):\n%s", diff)
	}
	if laptop := mustDiscover(t, "laptop", nil); laptop.NICs == nil || len(laptop.NICs) != 0 {
		t.Errorf("laptop NICs = %#v, want empty and not nil", laptop.NICs)
	}
}

func TestDiscoverNVLink(t *testing.T) {
	t.Run("mesh", func(t *testing.T) {
		topo := mustDiscover(t, "dgx-h200", topology.MeshNVLink())
		if !topo.NVLinkKnown {
			t.Fatal("NVLinkKnown = false")
		}
		for _, g := range topo.GPUs {
			if len(g.NVLinkPeers) != 7 {
				t.Errorf("GPU %d: %d NVLink peers, want 7 (all-to-all)", g.Index, len(g.NVLinkPeers))
			}
			for _, p := range g.NVLinkPeers {
				if p == g.BusID {
					t.Errorf("GPU %d lists itself as a peer", g.Index)
				}
			}
		}
	})
	t.Run("static pairs in NVML form", func(t *testing.T) {
		// One direction only, NVML's 8-digit upper-case bus IDs, and a
		// peer that is not a GPU of this host: normalized, made
		// symmetric, filtered.
		topo := mustDiscover(t, "dgx-h200", topology.StaticNVLink{
			"00000000:1B:00.0": {"00000000:43:00.0", "00000000:05:00.0"},
		})
		want := map[string][]string{"0000:1b:00.0": {"0000:43:00.0"}, "0000:43:00.0": {"0000:1b:00.0"}}
		for _, g := range topo.GPUs {
			w := want[g.BusID]
			if w == nil {
				w = []string{}
			}
			if diff := cmp.Diff(w, g.NVLinkPeers); diff != "" {
				t.Errorf("GPU %s peers (-want +got):\n%s", g.BusID, diff)
			}
		}
	})
	t.Run("known none", func(t *testing.T) {
		topo := mustDiscover(t, "laptop", topology.StaticNVLink(nil))
		if !topo.NVLinkKnown || topo.GPUs[0].NVLinkPeers == nil || len(topo.GPUs[0].NVLinkPeers) != 0 {
			t.Errorf("NVLinkKnown = %v, peers = %#v; want true and []", topo.NVLinkKnown, topo.GPUs[0].NVLinkPeers)
		}
	})
	for name, prober := range map[string]topology.NVLinkProber{
		"no prober":   nil,
		"unsupported": noNVML,
		"failing": topology.NVLinkProberFunc(func(context.Context, []string) (map[string][]string, error) {
			return nil, errors.New("NVML: get handle of GPU 0000:1b:00.0: ERROR_GPU_IS_LOST")
		}),
	} {
		t.Run(name, func(t *testing.T) {
			topo := mustDiscover(t, "dgx-h200", prober)
			if topo.NVLinkKnown {
				t.Error("NVLinkKnown = true, want false")
			}
			for _, g := range topo.GPUs {
				if g.NVLinkPeers != nil {
					t.Errorf("GPU %d peers = %v, want nil (unknown)", g.Index, g.NVLinkPeers)
				}
			}
			if wantWarn := prober != nil; (len(topo.Warnings) == 1) != wantWarn {
				t.Errorf("Warnings = %q", topo.Warnings)
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		prober := topology.NVLinkProberFunc(func(ctx context.Context, _ []string) (map[string][]string, error) {
			cancel()
			return nil, ctx.Err()
		})
		_, err := topology.Discover(ctx, topology.WithSysfsRoot(sysfsRoot("dgx-h200")), topology.WithNVLinkProber(prober))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Discover = %v, want context.Canceled", err)
		}
	})
}

func TestUnsupportedError(t *testing.T) {
	_, err := noNVML.NVLinkPeers(t.Context(), nil)
	if !errors.Is(err, topology.ErrNotSupported) {
		t.Errorf("errors.Is(%v, ErrNotSupported) = false", err)
	}
	var ue *topology.UnsupportedError
	if !errors.As(err, &ue) || ue.Feature != "NVML" {
		t.Errorf("errors.As UnsupportedError: %v", err)
	}
	wrapped := errors.Join(errors.New("probe"), err)
	if !errors.Is(wrapped, topology.ErrNotSupported) {
		t.Error("wrapped UnsupportedError does not match ErrNotSupported")
	}
	if errors.Is(errors.New("other"), topology.ErrNotSupported) {
		t.Error("unrelated error matches ErrNotSupported")
	}
}

// TestDiscoverBrokenTrees breaks one file of a copied tree at a time.
func TestDiscoverBrokenTrees(t *testing.T) {
	const (
		gpu0 = "bus/pci/devices/0000:1b:00.0"
		port = "class/infiniband/mlx5_3/ports/1"
	)
	tests := []struct {
		name   string
		mutate func(t *testing.T, root string)
		// wantErr is a substring of the error; "" means Discover succeeds
		// and check runs.
		wantErr   string
		wantErrIs error
		check     func(t *testing.T, topo *topology.Topology)
	}{
		{
			name:      "missing GPU vendor",
			mutate:    func(t *testing.T, root string) { removeAll(t, root, gpu0+"/vendor") },
			wantErr:   "PCI device 0000:1b:00.0: read vendor",
			wantErrIs: fs.ErrNotExist,
		},
		{
			name:      "missing GPU class",
			mutate:    func(t *testing.T, root string) { removeAll(t, root, gpu0+"/class") },
			wantErr:   "PCI device 0000:1b:00.0: read class",
			wantErrIs: fs.ErrNotExist,
		},
		{
			name:    "malformed GPU class",
			mutate:  func(t *testing.T, root string) { writeFile(t, root, gpu0+"/class", "0x03zz00") },
			wantErr: "PCI device 0000:1b:00.0: read class",
		},
		{
			name:   "missing GPU numa_node",
			mutate: func(t *testing.T, root string) { removeAll(t, root, gpu0+"/numa_node") },
			check: func(t *testing.T, topo *topology.Topology) {
				g, p := topo.GPUs[0], topo.Placements[0]
				if g.NUMANode != -1 || p.NUMANode != -1 {
					t.Errorf("numa_node = %d, placement node %d; want -1, -1", g.NUMANode, p.NUMANode)
				}
				// Proxy CPUs fall back to the local_cpulist (node 0's CPUs).
				if len(p.ProxyCPUs) != 2 || !g.LocalCPUs.Contains(p.ProxyCPUs[0]) || !strings.Contains(p.Reason, "local_cpulist") {
					t.Errorf("placement %+v: want 2 CPUs from local_cpulist and a reason", p)
				}
			},
		},
		{
			name:    "malformed GPU numa_node",
			mutate:  func(t *testing.T, root string) { writeFile(t, root, gpu0+"/numa_node", "zero") },
			wantErr: "read numa_node of 0000:1b:00.0",
		},
		{
			name:   "missing GPU local_cpulist",
			mutate: func(t *testing.T, root string) { removeAll(t, root, gpu0+"/local_cpulist") },
			check: func(t *testing.T, topo *topology.Topology) {
				if topo.GPUs[0].LocalCPUs != nil {
					t.Errorf("LocalCPUs = %v, want none", topo.GPUs[0].LocalCPUs)
				}
			},
		},
		{
			name:    "malformed GPU local_cpulist",
			mutate:  func(t *testing.T, root string) { writeFile(t, root, gpu0+"/local_cpulist", "0-55,112-") },
			wantErr: "parse local_cpulist of 0000:1b:00.0",
		},
		{
			name: "malformed NUMA node cpulist",
			mutate: func(t *testing.T, root string) {
				writeFile(t, root, "devices/system/node/node1/cpulist", "56-111,168-x")
			},
			wantErr: "parse cpulist of NUMA node 1",
		},
		{
			name:      "missing NUMA node cpulist",
			mutate:    func(t *testing.T, root string) { removeAll(t, root, "devices/system/node/node1/cpulist") },
			wantErr:   "read cpulist of NUMA node 1",
			wantErrIs: fs.ErrNotExist,
		},
		{
			name:   "no NUMA support",
			mutate: func(t *testing.T, root string) { removeAll(t, root, "devices/system/node") },
			check: func(t *testing.T, topo *topology.Topology) {
				if len(topo.NUMANodes) != 0 || topo.NUMANodes == nil {
					t.Errorf("NUMANodes = %#v, want empty", topo.NUMANodes)
				}
				if p := topo.Placements[4]; len(p.ProxyCPUs) != 2 || !topo.GPUs[4].LocalCPUs.Contains(p.ProxyCPUs[0]) {
					t.Errorf("GPU 4 placement %+v: want CPUs from its local_cpulist", p)
				}
			},
		},
		{
			name:      "missing online CPUs",
			mutate:    func(t *testing.T, root string) { removeAll(t, root, "devices/system/cpu/online") },
			wantErr:   "read online CPUs",
			wantErrIs: fs.ErrNotExist,
		},
		{
			name:    "malformed online CPUs",
			mutate:  func(t *testing.T, root string) { writeFile(t, root, "devices/system/cpu/online", "0-223,") },
			wantErr: "parse online CPUs",
		},
		{
			name:   "no PCI bus",
			mutate: func(t *testing.T, root string) { removeAll(t, root, "bus/pci") },
			check: func(t *testing.T, topo *topology.Topology) {
				if len(topo.GPUs) != 0 || len(topo.Placements) != 0 || topo.NVLinkKnown {
					t.Errorf("GPUs %d, placements %d, NVLinkKnown %v: want none", len(topo.GPUs), len(topo.Placements), topo.NVLinkKnown)
				}
			},
		},
		{
			name:   "no infiniband class",
			mutate: func(t *testing.T, root string) { removeAll(t, root, "class/infiniband") },
			check: func(t *testing.T, topo *topology.Topology) {
				if len(topo.NICs) != 0 {
					t.Errorf("%d NICs, want 0", len(topo.NICs))
				}
				for _, p := range topo.Placements {
					if p.NICs == nil || len(p.NICs) != 0 || p.Reason != "no RDMA NIC found" {
						t.Errorf("placement %+v: want no NICs and a reason", p)
					}
				}
			},
		},
		{
			name:      "missing port rate",
			mutate:    func(t *testing.T, root string) { removeAll(t, root, port+"/rate") },
			wantErr:   "mlx5_3 port 1: read rate",
			wantErrIs: fs.ErrNotExist,
		},
		{
			name:    "malformed port rate",
			mutate:  func(t *testing.T, root string) { writeFile(t, root, port+"/rate", "fast") },
			wantErr: "mlx5_3 port 1: parse rate",
		},
		{
			name:      "missing port state",
			mutate:    func(t *testing.T, root string) { removeAll(t, root, port+"/state") },
			wantErr:   "mlx5_3 port 1: read state",
			wantErrIs: fs.ErrNotExist,
		},
		{
			name:    "malformed port state",
			mutate:  func(t *testing.T, root string) { writeFile(t, root, port+"/state", "ACTIVE") },
			wantErr: "mlx5_3 port 1: parse state",
		},
		{
			name: "missing optional NIC files",
			mutate: func(t *testing.T, root string) {
				removeAll(t, root, "class/infiniband/mlx5_3/node_guid")
				removeAll(t, root, port+"/phys_state")
				removeAll(t, root, port+"/link_layer")
			},
			check: func(t *testing.T, topo *topology.Topology) {
				n := topo.NICs[3]
				if n.NodeGUID != "" || n.Ports[0].PhysState != "" || n.Ports[0].LinkLayer != "" || !n.Active() {
					t.Errorf("mlx5_3 = %+v: want empty GUID, phys_state, link_layer and still ACTIVE", n)
				}
			},
		},
		{
			name:    "malformed NIC numa_node",
			mutate:  func(t *testing.T, root string) { writeFile(t, root, "class/infiniband/mlx5_3/device/numa_node", "") },
			wantErr: "read numa_node of mlx5_3 (0000:5e:00.0)",
		},
		{
			name: "software RDMA device",
			mutate: func(t *testing.T, root string) {
				// rxe0 (Soft-RoCE) has no PCI device.
				dir := filepath.Join(root, "class", "infiniband", "rxe0", "ports", "1")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for name, v := range map[string]string{"state": "4: ACTIVE", "phys_state": "5: LinkUp", "link_layer": "Ethernet", "rate": "100 Gb/sec (4X EDR)"} {
					writeFile(t, root, filepath.Join("class", "infiniband", "rxe0", "ports", "1", name), v)
				}
			},
			check: func(t *testing.T, topo *topology.Topology) {
				n := topo.NICs[len(topo.NICs)-1]
				if n.Name != "rxe0" || n.BusID != "" || n.PCIPath != nil || n.NUMANode != -1 || n.Kind != topology.KindIBVerbs {
					t.Errorf("rxe0 = %+v", n)
				}
				// Never preferred over a ConnectX under the GPU's switch.
				for _, p := range topo.Placements {
					if p.NICs[0].Name == "rxe0" {
						t.Errorf("GPU %d placed on rxe0", p.GPU)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t, "dgx-h200")
			tt.mutate(t, root)
			topo, err := discoverAt(t, root, topology.MeshNVLink())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Discover: %v", err)
				}
				tt.check(t, topo)
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Discover error = %v, want one containing %q", err, tt.wantErr)
			}
			if tt.wantErrIs != nil && !errors.Is(err, tt.wantErrIs) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.wantErrIs)
			}
		})
	}
}

func TestDiscoverBadRoot(t *testing.T) {
	_, err := discoverAt(t, filepath.Join(t.TempDir(), "nonexistent"), nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Discover on a missing root = %v, want fs.ErrNotExist", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.NewFS(file); err == nil {
		t.Error("NewFS on a regular file: want an error")
	}
}

// TestJSONNames checks that every field Python sees has a snake_case name.
func TestJSONNames(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] {
			return
		}
		seen[typ] = true
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !snake.MatchString(name) {
				t.Errorf("%s.%s: json name %q is not snake_case", typ.Name(), f.Name, name)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(topology.Topology{}))
	if len(seen) < 6 {
		t.Errorf("walked only %d struct types", len(seen))
	}

	b, err := json.Marshal(mustDiscover(t, "laptop", nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"nics":[]`, `"nvlink_peers":null`, `"local_cpus":"0-15"`, `"proxy_cpus":[14,15]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("laptop JSON lacks %s:\n%s", want, b)
		}
	}
}
