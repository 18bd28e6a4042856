package ibverbs

import (
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

// The masks must be exactly the verbs spec's required attributes for RC
// (IB spec 11.2.4.2, ibv_modify_qp(3)): a missing one fails on every HCA, an
// extra one on some.
func TestRCStateMachineMasks(t *testing.T) {
	_, m := rcInit(1)
	if want := verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags; m != want {
		t.Errorf("INIT mask %#x, want %#x", m, want)
	}
	_, m = rcRTR(endpoint{}, endpoint{}, 1, 2, pathOptions{})
	if want := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
		verbs.QPAttrMaxDestRDAtomic | verbs.QPAttrMinRNRTimer; m != want {
		t.Errorf("RTR mask %#x, want %#x", m, want)
	}
	_, m = rcRTS(3, pathOptions{})
	if want := verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry |
		verbs.QPAttrMaxQPRDAtomic; m != want {
		t.Errorf("RTS mask %#x, want %#x", m, want)
	}
	a, m := rcError()
	if a.State != verbs.QPStateError || m != verbs.QPAttrState {
		t.Errorf("ERR: %+v %#x", a, m)
	}
}

func TestRCAttributes(t *testing.T) {
	a, _ := rcInit(2)
	if a.State != verbs.QPStateInit || a.Port != 2 || a.PKeyIndex != 0 || a.AccessFlags != verbs.AccessRemoteWrite {
		t.Errorf("INIT %+v", a)
	}
	roceL := endpoint{LinkLayer: verbs.LinkLayerEthernet, Port: 1, GID: gid(t, "::ffff:10.0.0.1"), GIDIndex: 3, GIDType: verbs.GIDTypeRoCEv2, MTU: 5}
	roceR := endpoint{LinkLayer: verbs.LinkLayerEthernet, Port: 1, GID: gid(t, "::ffff:10.0.0.2"), GIDType: verbs.GIDTypeRoCEv2, MTU: 3}
	o := pathOptions{TrafficClass: 106, SL: 3, Timeout: 17}
	a, _ = rcRTR(roceL, roceR, 0x123, 0x456, o)
	want := verbs.QPAttr{
		State: verbs.QPStateRTR, PathMTU: 3, DestQPN: 0x123, RQPSN: 0x456, MaxDestRDAtomic: 1, MinRNRTimer: 12,
		AH: verbs.AHAttr{IsGlobal: true, DGID: roceR.GID, SGIDIndex: 3, HopLimit: 64, TrafficClass: 106, SL: 3, Port: 1},
	}
	if a != want {
		t.Errorf("RoCE RTR\n got %+v\nwant %+v", a, want)
	}
	ibL := endpoint{LinkLayer: verbs.LinkLayerInfiniBand, Port: 1, LID: 7, GID: gid(t, "fe80::1"), MTU: 5}
	ibR := endpoint{LinkLayer: verbs.LinkLayerInfiniBand, Port: 1, LID: 9, GID: gid(t, "fe80::2"), MTU: 5}
	a, _ = rcRTR(ibL, ibR, 1, 2, o)
	if a.AH.IsGlobal || a.AH.DLID != 9 || a.AH.SL != 3 || a.PathMTU != 5 {
		t.Errorf("IB RTR within a subnet: %+v", a.AH)
	}
	ibR.GID = gid(t, "fec0:0:0:1::2")
	a, _ = rcRTR(ibL, ibR, 1, 2, o)
	if !a.AH.IsGlobal || a.AH.DGID != ibR.GID || a.AH.DLID != 9 || a.AH.HopLimit != 255 {
		t.Errorf("IB RTR across subnets: %+v", a.AH)
	}
	a, _ = rcRTS(0xabcdef, o)
	if a.State != verbs.QPStateRTS || a.SQPSN != 0xabcdef || a.Timeout != 17 || a.RetryCnt != 7 || a.RNRRetry != 7 || a.MaxRDAtomic != 1 {
		t.Errorf("RTS %+v", a)
	}
}

func TestAckTimeout(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want uint8
	}{
		{0, 12}, {time.Second, 14}, {3 * time.Second, 16}, {5 * time.Second, 17}, {60 * time.Second, 20}, {time.Hour, 20},
	} {
		got := ackTimeout(tc.d)
		if got != tc.want {
			t.Errorf("ackTimeout(%v) = %d, want %d", tc.d, got, tc.want)
		}
		if tc.d >= 200*time.Millisecond && tc.d <= 30*time.Second {
			if total := 8 * 4096 * time.Nanosecond << got; total > tc.d {
				t.Errorf("ackTimeout(%v) = %d: %v of retries exceed it", tc.d, got, total)
			}
		}
	}
}
