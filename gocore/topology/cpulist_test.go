package topology_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mkernel/mkernel/gocore/topology"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want topology.CPUList
	}{
		{"", nil},
		{"\n", nil},
		{"0", topology.CPUList{0}},
		{"0-3,8-11\n", topology.CPUList{0, 1, 2, 3, 8, 9, 10, 11}},
		{"0-1", topology.CPUList{0, 1}},
		{"7-7", topology.CPUList{7}},
		{"5,1-2", topology.CPUList{1, 2, 5}},
		{"1,1,0-1", topology.CPUList{0, 1}},
		{"56-59,168-169", topology.CPUList{56, 57, 58, 59, 168, 169}},
	}
	for _, tt := range tests {
		got, err := topology.ParseCPUList(tt.in)
		if err != nil {
			t.Errorf("ParseCPUList(%q): %v", tt.in, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseCPUList(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestParseCPUListMalformed(t *testing.T) {
	for _, in := range []string{
		"a", "1-", "-1", "3-1", "1,,2", ",1", "1,", "1-2-3", "+1", "1 - 2", "0x1",
		"1-99999999999999999999", "0-70000", "0:2", "1-3:2/4",
	} {
		if got, err := topology.ParseCPUList(in); err == nil {
			t.Errorf("ParseCPUList(%q) = %v, want an error", in, got)
		}
	}
}

func TestCPUListString(t *testing.T) {
	tests := []struct {
		in   topology.CPUList
		want string
	}{
		{nil, ""},
		{topology.CPUList{}, ""},
		{topology.CPUList{4}, "4"},
		{topology.CPUList{0, 1}, "0-1"},
		{topology.CPUList{1, 3}, "1,3"},
		{topology.CPUList{0, 1, 2, 3, 8}, "0-3,8"},
		{topology.CPUList{5, 3, 4, 4}, "3-5"},
		{topology.CPUList{0, 1, 2, 3, 8, 9, 10, 11}, "0-3,8-11"},
	}
	for _, tt := range tests {
		if got := tt.in.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", []int(tt.in), got, tt.want)
		}
	}
	// Round trip.
	for _, s := range []string{"0-55,112-167", "0", "1,3,5-6", "0-191"} {
		l, err := topology.ParseCPUList(s)
		if err != nil {
			t.Fatal(err)
		}
		if l.String() != s {
			t.Errorf("ParseCPUList(%q).String() = %q", s, l.String())
		}
	}
}

func TestCPUListJSON(t *testing.T) {
	type wrap struct {
		CPUs topology.CPUList `json:"cpus"`
	}
	b, err := json.Marshal(wrap{topology.CPUList{0, 1, 2, 3, 8}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"cpus":"0-3,8"}` {
		t.Errorf("Marshal = %s", b)
	}
	var w wrap
	if err := json.Unmarshal([]byte(`{"cpus":"0-1,4"}`), &w); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(topology.CPUList{0, 1, 4}, w.CPUs); diff != "" {
		t.Errorf("Unmarshal (-want +got):\n%s", diff)
	}
	for _, bad := range []string{`{"cpus":[0,1]}`, `{"cpus":"1-"}`} {
		if err := json.Unmarshal([]byte(bad), &w); err == nil {
			t.Errorf("Unmarshal(%s): want an error", bad)
		}
	}
}

func TestCPUListIntersect(t *testing.T) {
	a := topology.CPUList{0, 1, 2, 3, 8, 9}
	got := a.Intersect(topology.CPUList{2, 3, 4, 9})
	if diff := cmp.Diff(topology.CPUList{2, 3, 9}, got); diff != "" {
		t.Errorf("Intersect (-want +got):\n%s", diff)
	}
	if !a.Contains(8) || a.Contains(4) {
		t.Errorf("Contains wrong for %v", a)
	}
}
