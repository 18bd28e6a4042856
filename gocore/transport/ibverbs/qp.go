package ibverbs

import (
	"time"

	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
)

// The RC state machine: RESET → INIT → RTR → RTS, each step's attributes and
// mask as pure functions so tests can check them against the verbs spec's
// required/optional attribute table without a device.

const (
	// rnrRetryInfinite (7) makes the requester retry receiver-not-ready
	// forever: only the connect handshake's SEND can meet an RNR NAK, and
	// the peer posts its receive before it leaves INIT.
	rnrRetryInfinite = 7
	// retryCount is the IB maximum (7): a lost packet is retried that many
	// times, each after the ACK timeout, before the QP fails with
	// "transport retry counter exceeded" (the peer is gone).
	retryCount = 7
	// minRNRTimer 12 is 0.64 ms between RNR retries.
	minRNRTimer = 12
	// rdAtomic: one outstanding RDMA read/atomic each way. Nothing here
	// issues reads; 1 keeps every HCA's checks happy.
	rdAtomic = 1
	// hopLimitRoCE bounds RoCE v2 routing; hopLimitIB is used in a GRH
	// between IB subnets.
	hopLimitRoCE = 64
	hopLimitIB   = 255
)

// endpoint is one end's addressing, as the blob carries it.
type endpoint struct {
	LinkLayer verbs.LinkLayer
	Port      uint8
	LID       uint16
	GID       verbs.GID
	GIDIndex  uint8 // local end only
	GIDType   verbs.GIDType
	MTU       verbs.MTU
}

// pathOptions are the fabric settings of a connection.
type pathOptions struct {
	TrafficClass uint8
	SL           uint8
	Timeout      uint8 // ACK timeout exponent, see ackTimeout
}

// rcInit moves a fresh RC QP to INIT on port, accepting remote writes.
func rcInit(port uint8) (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{
			State:       verbs.QPStateInit,
			PKeyIndex:   0,
			Port:        port,
			AccessFlags: verbs.AccessRemoteWrite,
		},
		verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
}

// rcAH addresses the remote end. InfiniBand routes by LID and adds a GRH
// only across subnets; RoCE always needs the GRH (it is the IP header), with
// the local GID index selected by SelectGID.
func rcAH(local, remote endpoint, o pathOptions) verbs.AHAttr {
	ah := verbs.AHAttr{Port: local.Port, SL: o.SL}
	if local.LinkLayer == verbs.LinkLayerEthernet {
		ah.IsGlobal = true
		ah.DGID = remote.GID
		ah.SGIDIndex = local.GIDIndex
		ah.HopLimit = hopLimitRoCE
		ah.TrafficClass = o.TrafficClass
		return ah
	}
	ah.DLID = remote.LID
	if local.GID.SubnetPrefix() != remote.GID.SubnetPrefix() {
		ah.IsGlobal = true
		ah.DGID = remote.GID
		ah.SGIDIndex = local.GIDIndex
		ah.HopLimit = hopLimitIB
		ah.TrafficClass = o.TrafficClass
	}
	return ah
}

// pathMTU is the smaller active MTU of the two ends.
func pathMTU(a, b verbs.MTU) verbs.MTU { return min(a, b) }

// rcRTR moves an INIT QP to ready-to-receive from the remote QP.
func rcRTR(local, remote endpoint, remoteQPN, remotePSN uint32, o pathOptions) (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{
			State:           verbs.QPStateRTR,
			AH:              rcAH(local, remote, o),
			PathMTU:         pathMTU(local.MTU, remote.MTU),
			DestQPN:         remoteQPN,
			RQPSN:           remotePSN,
			MaxDestRDAtomic: rdAtomic,
			MinRNRTimer:     minRNRTimer,
		},
		verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN |
			verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRDAtomic | verbs.QPAttrMinRNRTimer
}

// rcRTS moves an RTR QP to ready-to-send starting at localPSN.
func rcRTS(localPSN uint32, o pathOptions) (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{
			State:       verbs.QPStateRTS,
			SQPSN:       localPSN,
			Timeout:     o.Timeout,
			RetryCnt:    retryCount,
			RNRRetry:    rnrRetryInfinite,
			MaxRDAtomic: rdAtomic,
		},
		verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
			verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRDAtomic
}

// rcError moves a QP to the error state, which flushes its outstanding work
// requests with IBV_WC_WR_FLUSH_ERR completions.
func rcError() (verbs.QPAttr, verbs.QPAttrMask) {
	return verbs.QPAttr{State: verbs.QPStateError}, verbs.QPAttrState
}

// ackTimeout returns the ACK timeout exponent t (the HCA waits 4.096 µs ×
// 2^t for an ACK before retrying) such that the first try and retryCount
// retries fit in d: 8 × 4.096 µs × 2^t ≤ d, clamped to [12, 20] (16 ms to
// 4.3 s per try; 20 is NCCL's default). A dead peer is then noticed by the
// hardware within about d; the Poll watchdog covers what it does not.
func ackTimeout(d time.Duration) uint8 {
	const unit = 4096 * time.Nanosecond
	t := uint8(12)
	for t < 20 && (retryCount+1)*unit<<(t+1) <= d {
		t++
	}
	return t
}
