package topology

import (
	"slices"
	"testing"
)

func TestNaturalOrder(t *testing.T) {
	got := []string{"mlx5_10", "mlx5_2", "rdmap113s0", "mlx5_0", "rdmap79s0", "efa_1", "mlx5_1", "rdmap80s0"}
	slices.SortFunc(got, naturalCompare)
	want := []string{"efa_1", "mlx5_0", "mlx5_1", "mlx5_2", "mlx5_10", "rdmap79s0", "rdmap80s0", "rdmap113s0"}
	if !slices.Equal(got, want) {
		t.Errorf("natural order = %v, want %v", got, want)
	}
	if naturalCompare("a01", "a1") == 0 {
		t.Error(`naturalCompare("a01", "a1") = 0; must still be a total order`)
	}
}

func TestNormalizeBusID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"0000:18:00.0", "0000:18:00.0"},
		{"00000000:1B:00.0", "0000:1b:00.0"},
		{"0000:DF:1f.7", "0000:df:1f.7"},
		{"10000:01:00.0", "10000:01:00.0"}, // Intel VMD domain
	}
	for _, tt := range tests {
		got, err := NormalizeBusID(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("NormalizeBusID(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "18:00.0", "0000:18:00", "0000:118:00.0", "0000:18:20.0", "0000:18:00.8", "zz:18:00.0"} {
		if got, err := NormalizeBusID(bad); err == nil {
			t.Errorf("NormalizeBusID(%q) = %q, want an error", bad, got)
		}
	}
	ids := []string{"0000:df:00.0", "10000:01:00.0", "0000:1b:00.0", "0000:1b:00.1", "0000:9d:00.0"}
	slices.SortFunc(ids, compareBusID)
	want := []string{"0000:1b:00.0", "0000:1b:00.1", "0000:9d:00.0", "0000:df:00.0", "10000:01:00.0"}
	if !slices.Equal(ids, want) {
		t.Errorf("bus ID order = %v, want %v", ids, want)
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{"400 Gb/sec (4X NDR)", 400},
		{"200 Gb/sec (2X NDR)", 200},
		{"100 Gb/sec (4X EDR)", 100},
		{"2.5 Gb/sec (1X SDR)", 2.5},
		{"800 Gb/sec (4X XDR)", 800},
		{"25 Gb/sec", 25},
	}
	for _, tt := range tests {
		if got, err := ParseRate(tt.in); err != nil || got != tt.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "fast", "400", "400 Mb/sec (4X NDR)", "x Gb/sec (4X NDR)", "-1 Gb/sec", "NaN Gb/sec", "Inf Gb/sec"} {
		if got, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", bad, got)
		}
	}
}

func TestStripStateNumber(t *testing.T) {
	for in, want := range map[string]string{"4: ACTIVE": "ACTIVE", "1: DOWN": "DOWN", "5: LinkUp": "LinkUp", "7: Phy Test": "Phy Test"} {
		if got, err := stripStateNumber(in); err != nil || got != want {
			t.Errorf("stripStateNumber(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ACTIVE", "4:", "x: ACTIVE", ""} {
		if got, err := stripStateNumber(bad); err == nil {
			t.Errorf("stripStateNumber(%q) = %q, want an error", bad, got)
		}
	}
}

func TestPCILocality(t *testing.T) {
	sw := func(root, port, dev string) []string {
		return []string{"pci0000:" + root, "0000:" + root + ":01.0", "0000:16:00.0", "0000:17:" + port, "0000:" + dev + ":00.0"}
	}
	tests := []struct {
		name     string
		a, b     []string
		sameNUMA bool
		want     Locality
		common   int
		distance int
	}{
		{"same switch", sw("15", "03.0", "1b"), sw("15", "00.0", "18"), true, LocalityPIX, 3, 4},
		{"two switches", append(sw("15", "03.0", "1b")[:4], "0000:20:00.0", "0000:21:00.0", "0000:22:00.0"),
			sw("15", "00.0", "18"), true, LocalityPXB, 3, 6},
		{"host bridge", []string{"pci0000:00", "0000:00:01.0", "0000:01:00.0"},
			[]string{"pci0000:00", "0000:00:03.0", "0000:03:00.0"}, true, LocalityPHB, 1, 4},
		{"same node", sw("15", "03.0", "1b"), sw("3d", "00.0", "40"), true, LocalityNode, 0, -1},
		{"other node", sw("15", "03.0", "1b"), sw("97", "00.0", "9a"), false, LocalitySys, 0, -1},
		{"no path", sw("15", "03.0", "1b"), nil, false, LocalitySys, 0, -1},
	}
	for _, tt := range tests {
		loc, common, dist := pciLocality(tt.a, tt.b, tt.sameNUMA)
		if loc != tt.want || common != tt.common || dist != tt.distance {
			t.Errorf("%s: pciLocality = %s, %d, %d; want %s, %d, %d", tt.name, loc, common, dist, tt.want, tt.common, tt.distance)
		}
	}
}
