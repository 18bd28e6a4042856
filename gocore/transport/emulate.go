package transport

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// EnvNetEmulate shapes the loopback transport like a network link, so that emulated nodes
// on one host are communication-bound the way real nodes are: "RATE[,LATENCY]", e.g.
// "50GB/s,3us" (a 400 Gb/s NIC) or "400Gb/s,2us". RATE is a number with a unit of B/s,
// KB/s, MB/s, GB/s (powers of 1000) or b/s, Kb/s, Mb/s, Gb/s (bits), or "inf" for no
// limit; LATENCY is a Go duration ("3us", "1.5µs", "0"). Each rank's endpoint sends at
// most RATE bytes per second in total, over all its peers (one NIC's egress), and an op's
// data and signal land LATENCY after its last byte left. Unset or empty: no shaping.
// Backends other than loopback ignore it (real links shape themselves).
const EnvNetEmulate = "MKERNEL_NET_EMULATE"

// LinkShape is an emulated link (EnvNetEmulate). The zero value shapes nothing.
type LinkShape struct {
	// BytesPerSecond is the endpoint's egress rate; 0 means unlimited.
	BytesPerSecond float64
	// Latency is added between an op's last byte leaving and its placement at the peer.
	Latency time.Duration
}

// Active reports whether the shape limits anything.
func (s LinkShape) Active() bool { return s.BytesPerSecond > 0 || s.Latency > 0 }

// SerializeNanos is how long n bytes take to leave at the shape's rate (0 when unlimited).
func (s LinkShape) SerializeNanos(n uint64) int64 {
	if s.BytesPerSecond <= 0 || n == 0 {
		return 0
	}
	return int64(math.Ceil(float64(n) * 1e9 / s.BytesPerSecond))
}

func (s LinkShape) String() string {
	rate := "inf"
	if s.BytesPerSecond > 0 {
		rate = strconv.FormatFloat(s.BytesPerSecond/1e9, 'g', -1, 64) + "GB/s"
	}
	return rate + "," + s.Latency.String()
}

// rateUnits maps a rate suffix (lower case) to bytes per second per unit.
var rateUnits = []struct {
	suffix string
	scale  float64
}{
	// Longest suffixes first: "gb/s" must not match as "b/s".
	{"gb/s", 1e9}, {"mb/s", 1e6}, {"kb/s", 1e3}, {"b/s", 1},
}

// parseRate reads "50GB/s" / "400Gb/s" / "inf"; the unit's case says bytes (B) or bits (b).
func parseRate(v string) (float64, error) {
	if strings.EqualFold(v, "inf") || v == "0" {
		return 0, nil
	}
	lower := strings.ToLower(v)
	for _, u := range rateUnits {
		if !strings.HasSuffix(lower, u.suffix) {
			continue
		}
		num := v[:len(v)-len(u.suffix)]
		unit := v[len(v)-len(u.suffix):]
		scale := u.scale
		if strings.Contains(unit, "b") { // lower-case b: bits
			scale /= 8
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || x <= 0 || math.IsInf(x, 0) || math.IsNaN(x) {
			return 0, fmt.Errorf("rate %q: want a positive number before %s", v, unit)
		}
		return x * scale, nil
	}
	return 0, fmt.Errorf("rate %q: want a unit of B/s, KB/s, MB/s, GB/s (bytes) or b/s, Kb/s, Mb/s, Gb/s (bits), or inf", v)
}

// ParseLinkShape reads an EnvNetEmulate value: ok is false when it is empty; a malformed
// value is an error matching ErrInvalid that names the variable.
func ParseLinkShape(v string) (s LinkShape, ok bool, err error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return s, false, nil
	}
	rate, lat, hasLat := strings.Cut(v, ",")
	bad := func(e error) (LinkShape, bool, error) {
		return LinkShape{}, false, fmt.Errorf("%w: %s=%q: %w (e.g. 50GB/s,3us)", ErrInvalid, EnvNetEmulate, v, e)
	}
	if s.BytesPerSecond, err = parseRate(strings.TrimSpace(rate)); err != nil {
		return bad(err)
	}
	if hasLat {
		lat = strings.TrimSpace(lat)
		if lat != "0" {
			if s.Latency, err = time.ParseDuration(lat); err != nil {
				return bad(fmt.Errorf("latency: %w", err))
			}
		}
		if s.Latency < 0 {
			return bad(fmt.Errorf("latency %v is negative", s.Latency))
		}
	}
	return s, true, nil
}

// LinkShapeFromEnv reads EnvNetEmulate.
func LinkShapeFromEnv() (LinkShape, bool, error) { return ParseLinkShape(os.Getenv(EnvNetEmulate)) }
