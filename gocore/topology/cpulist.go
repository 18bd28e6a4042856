package topology

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxCPU bounds the CPU numbers ParseCPUList accepts, so a corrupt range such
// as "0-4000000000" fails instead of allocating gigabytes. Linux allows at most
// 8192 CPUs (CONFIG_NR_CPUS); this leaves room.
const maxCPU = 1 << 16

// CPUList is a sorted set of logical CPU numbers without duplicates.
//
// It reads and writes the kernel's cpulist format ("0-3,8-11", see
// cpuset(7)), both in sysfs and in JSON, where it is a string. The empty list
// is "".
type CPUList []int

// ParseCPUList parses a kernel cpulist such as "0-3,8-11\n". Surrounding
// white space is ignored; the empty string is the empty list. Ranges must be
// ascending; the result is sorted and deduplicated.
func ParseCPUList(s string) (CPUList, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var cpus CPUList
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := parseCPU(lo)
		if err != nil {
			return nil, fmt.Errorf("cpulist %q: %w", s, err)
		}
		last := first
		if isRange {
			if last, err = parseCPU(hi); err != nil {
				return nil, fmt.Errorf("cpulist %q: %w", s, err)
			}
			if last < first {
				return nil, fmt.Errorf("cpulist %q: descending range %q", s, part)
			}
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

func parseCPU(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("empty CPU number")
	}
	// Atoi would accept "+1"; the kernel never writes a sign.
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("bad CPU number %q", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxCPU {
		return 0, fmt.Errorf("CPU number %q out of range", s)
	}
	return n, nil
}

// String formats l as a kernel cpulist, collapsing runs into ranges:
// CPUList{0, 1, 2, 3, 8} is "0-3,8". l need not be sorted.
func (l CPUList) String() string {
	cpus := slices.Clone(l)
	slices.Sort(cpus)
	cpus = slices.Compact(cpus)
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Contains reports whether cpu is in l.
func (l CPUList) Contains(cpu int) bool {
	_, found := slices.BinarySearch(l, cpu)
	return found
}

// Intersect returns the CPUs in both l and other.
func (l CPUList) Intersect(other CPUList) CPUList {
	var out CPUList
	for _, c := range l {
		if other.Contains(c) {
			out = append(out, c)
		}
	}
	return out
}

// MarshalJSON writes l as a cpulist string.
func (l CPUList) MarshalJSON() ([]byte, error) {
	return json.Marshal(l.String())
}

// UnmarshalJSON reads a cpulist string.
func (l *CPUList) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("cpulist must be a JSON string: %w", err)
	}
	cpus, err := ParseCPUList(s)
	if err != nil {
		return err
	}
	*l = cpus
	return nil
}
