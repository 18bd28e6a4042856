package topology

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DefaultProxyCPUsPerGPU is how many proxy CPUs Place gives each GPU unless
// told otherwise: one for the send and one for the receive loop.
const DefaultProxyCPUsPerGPU = 2

// PlaceOption configures Place.
type PlaceOption func(*placeConfig)

type placeConfig struct {
	nicsPerGPU int // 0: len(NICs)/len(GPUs), at least 1
	cpusPerGPU int
}

// WithNICsPerGPU sets how many NICs each GPU gets. 0, the default, means
// len(NICs)/len(GPUs) but at least one: 1 on an 8×ConnectX-7 node, 2 on a
// node with 16 EFA devices for 8 GPUs.
func WithNICsPerGPU(n int) PlaceOption {
	return func(c *placeConfig) { c.nicsPerGPU = n }
}

// WithProxyCPUsPerGPU sets how many proxy CPUs each GPU gets (default
// DefaultProxyCPUsPerGPU).
func WithProxyCPUsPerGPU(n int) PlaceOption {
	return func(c *placeConfig) { c.cpusPerGPU = n }
}

// Place chooses, for every GPU of t, the NIC(s) its proxy should use and the
// CPUs its proxy threads should run on. It returns one Placement per GPU, in
// the order of t.GPUs, and is deterministic: the same topology in any NIC
// order gives the same answer.
//
// NICs are ranked per GPU by, in order: an ACTIVE port (a NIC whose ports are
// all down is used only when no NIC has an ACTIVE port), the longest common
// PCI path (same PCIe switch first, then same root port, then same host
// bridge), the same NUMA node, the shortest PCI distance, and the name. Each
// NIC goes to one GPU while there are enough; the rank decides who gets which,
// best pairs first over all GPUs. A GPU left short then shares the best NIC,
// the least used among equals.
//
// Proxy CPUs come from the GPU's NUMA node (its local_cpulist when the node
// is unknown), taken from the end of the node's online CPUs and never CPU 0
// unless it is the only one, distinct across GPUs of a node until the node
// runs out, then shared round-robin.
//
// A host without NICs is not an error: every Placement has an empty NICs list
// and says so in Reason. Errors are for a nil topology or invalid options.
func Place(t *Topology, opts ...PlaceOption) ([]Placement, error) {
	if t == nil {
		return nil, errors.New("place: nil topology")
	}
	c := placeConfig{cpusPerGPU: DefaultProxyCPUsPerGPU}
	for _, opt := range opts {
		opt(&c)
	}
	if c.nicsPerGPU < 0 {
		return nil, fmt.Errorf("place: %d NICs per GPU: must be at least 0", c.nicsPerGPU)
	}
	if c.cpusPerGPU < 0 {
		return nil, fmt.Errorf("place: %d proxy CPUs per GPU: must be at least 0", c.cpusPerGPU)
	}

	out := make([]Placement, len(t.GPUs))
	reasons := make([][]string, len(t.GPUs))
	for i, g := range t.GPUs {
		out[i] = Placement{
			GPU:       g.Index,
			GPUBusID:  g.BusID,
			NUMANode:  effectiveNode(t, g),
			NICs:      []NICChoice{},
			ProxyCPUs: []int{},
		}
	}
	placeNICs(t, c, out, reasons)
	placeCPUs(t, c, out, reasons)
	for i := range out {
		out[i].Reason = strings.Join(reasons[i], "; ")
	}
	return out, nil
}

// effectiveNode is the GPU's NUMA node, or the only node of a single-node
// host (where the kernel often reports -1), or -1.
func effectiveNode(t *Topology, g GPU) int {
	if g.NUMANode >= 0 {
		return g.NUMANode
	}
	if len(t.NUMANodes) == 1 {
		return t.NUMANodes[0].ID
	}
	return -1
}

// nicRank is how well a NIC suits a GPU.
type nicRank struct {
	active   bool
	common   int // common PCI path prefix length
	sameNUMA bool
	distance int // -1: unknown
	locality Locality
	port     int
}

// compareRank orders better ranks first.
func compareRank(a, b nicRank) int {
	dist := func(d int) int {
		if d < 0 {
			return 1 << 30
		}
		return d
	}
	return cmp.Or(
		-cmpBool(a.active, b.active),
		-cmp.Compare(a.common, b.common),
		-cmpBool(a.sameNUMA, b.sameNUMA),
		cmp.Compare(dist(a.distance), dist(b.distance)),
	)
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func rankNIC(t *Topology, g GPU, n NIC) nicRank {
	r := nicRank{distance: -1, port: 0}
	for _, p := range n.Ports {
		if p.Active() {
			r.active, r.port = true, p.Port
			break
		}
	}
	if !r.active && len(n.Ports) > 0 {
		r.port = n.Ports[0].Port
	}
	node := effectiveNode(t, g)
	r.sameNUMA = len(t.NUMANodes) <= 1 || node >= 0 && node == n.NUMANode
	r.locality, r.common, r.distance = pciLocality(g.PCIPath, n.PCIPath, r.sameNUMA)
	return r
}

// pciLocality classifies the path between two devices from their PCI paths
// (host bridge first), the way nvidia-smi topo does, and returns the length
// of the common prefix and the number of path elements between them.
func pciLocality(a, b []string, sameNUMA bool) (loc Locality, common, distance int) {
	for common < len(a) && common < len(b) && a[common] == b[common] {
		common++
	}
	if common == 0 {
		if sameNUMA {
			return LocalityNode, 0, -1
		}
		return LocalitySys, 0, -1
	}
	downA, downB := len(a)-common, len(b)-common
	distance = downA + downB
	switch {
	case common == 1:
		// Only the host bridge is shared.
		return LocalityPHB, common, distance
	case max(downA, downB) <= 2:
		// Below the common bridge each side has at most a downstream
		// port and itself: one PCIe switch.
		return LocalityPIX, common, distance
	}
	return LocalityPXB, common, distance
}

func placeNICs(t *Topology, c placeConfig, out []Placement, reasons [][]string) {
	if len(t.GPUs) == 0 {
		return
	}
	if len(t.NICs) == 0 {
		for i := range reasons {
			reasons[i] = append(reasons[i], "no RDMA NIC found")
		}
		return
	}

	nics := slices.Clone(t.NICs)
	slices.SortFunc(nics, func(a, b NIC) int { return naturalCompare(a.Name, b.Name) })
	perGPU := c.nicsPerGPU
	if perGPU == 0 {
		perGPU = max(1, len(nics)/len(t.GPUs))
	}
	cands := slices.DeleteFunc(slices.Clone(nics), func(n NIC) bool { return !n.Active() })
	if len(cands) == 0 {
		cands = nics
		for i := range reasons {
			reasons[i] = append(reasons[i], "no NIC port is ACTIVE; NICs chosen by locality only")
		}
	}
	perGPU = min(perGPU, len(cands))

	ranks := make([][]nicRank, len(t.GPUs))
	type pair struct{ g, n int }
	pairs := make([]pair, 0, len(t.GPUs)*len(cands))
	for g := range t.GPUs {
		ranks[g] = make([]nicRank, len(cands))
		for n := range cands {
			ranks[g][n] = rankNIC(t, t.GPUs[g], cands[n])
			pairs = append(pairs, pair{g, n})
		}
	}
	slices.SortStableFunc(pairs, func(a, b pair) int {
		return cmp.Or(compareRank(ranks[a.g][a.n], ranks[b.g][b.n]), a.g-b.g, a.n-b.n)
	})

	// Pass 1: each NIC to one GPU, best pairs first.
	chosen := make([][]int, len(t.GPUs))
	users := make([][]int, len(cands))
	for _, p := range pairs {
		if len(chosen[p.g]) < perGPU && len(users[p.n]) == 0 {
			chosen[p.g] = append(chosen[p.g], p.n)
			users[p.n] = append(users[p.n], p.g)
		}
	}
	// Pass 2: GPUs still short share the best NIC, the least used among
	// equally good ones.
	for g := range t.GPUs {
		for len(chosen[g]) < perGPU {
			best := -1
			for n := range cands {
				if slices.Contains(chosen[g], n) {
					continue
				}
				if best < 0 || cmp.Or(compareRank(ranks[g][n], ranks[g][best]), len(users[n])-len(users[best])) < 0 {
					best = n
				}
			}
			chosen[g] = append(chosen[g], best)
			users[best] = append(users[best], g)
		}
	}

	for g := range t.GPUs {
		slices.SortStableFunc(chosen[g], func(a, b int) int { return compareRank(ranks[g][a], ranks[g][b]) })
		for _, n := range chosen[g] {
			r, nic := ranks[g][n], cands[n]
			out[g].NICs = append(out[g].NICs, NICChoice{
				Name:        nic.Name,
				Port:        r.port,
				Kind:        nic.Kind,
				Locality:    r.locality,
				PCIDistance: r.distance,
				Active:      r.active,
			})
			if others := gpuIndexes(t, users[n], g); others != "" {
				reasons[g] = append(reasons[g], fmt.Sprintf("NIC %s shared with GPU %s", nic.Name, others))
			}
			if r.locality == LocalitySys {
				reasons[g] = append(reasons[g], fmt.Sprintf("NIC %s is on another NUMA node", nic.Name))
			}
		}
	}
}

// gpuIndexes lists the Index of GPUs gs other than self, "1,5".
func gpuIndexes(t *Topology, gs []int, self int) string {
	var idx []string
	for _, g := range gs {
		if g != self {
			idx = append(idx, strconv.Itoa(t.GPUs[g].Index))
		}
	}
	return strings.Join(idx, ",")
}

// cpuPool is the CPUs proxies of GPUs with the same locality take turns on.
type cpuPool struct {
	cpus  []int // descending: the end of the cpulist first
	next  int
	owner map[int]int // CPU -> first GPU (position in t.GPUs) given it
}

func placeCPUs(t *Topology, c placeConfig, out []Placement, reasons [][]string) {
	if c.cpusPerGPU == 0 {
		return
	}
	pools := make(map[string]*cpuPool)
	for g, gpu := range t.GPUs {
		key, cpus, note := proxyCPUSource(t, gpu)
		if note != "" {
			reasons[g] = append(reasons[g], note)
		}
		p := pools[key]
		if p == nil {
			if len(cpus) > 1 {
				cpus = slices.DeleteFunc(cpus, func(c int) bool { return c == 0 })
			}
			slices.Reverse(cpus)
			p = &cpuPool{cpus: cpus, owner: make(map[int]int)}
			pools[key] = p
		}
		k := min(c.cpusPerGPU, len(p.cpus))
		if k == 0 {
			reasons[g] = append(reasons[g], "no online CPU for proxy threads")
			continue
		}
		var sharedWith []int
		for range k {
			cpu := p.cpus[p.next%len(p.cpus)]
			p.next++
			if owner, ok := p.owner[cpu]; ok {
				if !slices.Contains(sharedWith, owner) {
					sharedWith = append(sharedWith, owner)
				}
			} else {
				p.owner[cpu] = g
			}
			out[g].ProxyCPUs = append(out[g].ProxyCPUs, cpu)
		}
		slices.Sort(out[g].ProxyCPUs)
		if len(sharedWith) > 0 {
			reasons[g] = append(reasons[g], fmt.Sprintf("proxy CPUs shared with GPU %s (%d CPUs for more GPUs)",
				gpuIndexes(t, sharedWith, g), len(p.cpus)))
		}
	}
}

// proxyCPUSource returns the CPUs a GPU's proxy may use, a key naming that
// set, and a note when it is not the GPU's NUMA node.
func proxyCPUSource(t *Topology, g GPU) (key string, cpus []int, note string) {
	online := func(l CPUList) []int {
		if len(t.OnlineCPUs) == 0 {
			return slices.Clone(l)
		}
		return l.Intersect(t.OnlineCPUs)
	}
	if node := effectiveNode(t, g); node >= 0 {
		for _, n := range t.NUMANodes {
			if n.ID == node {
				if cpus := online(n.CPUs); len(cpus) > 0 {
					return "node " + strconv.Itoa(node), cpus, ""
				}
			}
		}
	}
	if cpus := online(g.LocalCPUs); len(cpus) > 0 {
		return "local " + g.LocalCPUs.String(), cpus, "no CPUs known for the GPU's NUMA node; proxy CPUs from its local_cpulist"
	}
	return "online", slices.Clone(t.OnlineCPUs), "GPU's CPU locality unknown; proxy CPUs from all online CPUs"
}
