package verbs

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/mkernel/mkernel/gocore/transport"
)

// ErrNotSupported is transport.ErrNotSupported: the library, the headers it
// was built with, a device or an entry point is missing.
var ErrNotSupported = transport.ErrNotSupported

// ErrClosed is returned by calls on an object after its Close.
var ErrClosed = errors.New("verbs: object closed")

// DefaultLibrary and DefaultEFALibrary are the sonames dlopen looks for.
const (
	DefaultLibrary    = "libibverbs.so.1"
	DefaultEFALibrary = "libefa.so.1"
)

// CallError is a failed verbs call: the function and the errno it left.
// errors.Is(err, syscall.ENOMEM) and the like work through Unwrap.
type CallError struct {
	Func  string
	Errno syscall.Errno
}

func (e *CallError) Error() string { return fmt.Sprintf("%s: %v", e.Func, e.Errno) }

// Unwrap returns the errno.
func (e *CallError) Unwrap() error { return e.Errno }

// Is makes EOPNOTSUPP, ENOSYS and EPROTONOSUPPORT match ErrNotSupported.
func (e *CallError) Is(target error) bool {
	if target != ErrNotSupported {
		return false
	}
	switch e.Errno {
	case syscall.EOPNOTSUPP, syscall.ENOSYS, syscall.EPROTONOSUPPORT:
		return true
	}
	return false
}

// QPState is enum ibv_qp_state.
type QPState uint32

const (
	QPStateReset QPState = 0
	QPStateInit  QPState = 1
	QPStateRTR   QPState = 2
	QPStateRTS   QPState = 3
	QPStateError QPState = 6
)

func (s QPState) String() string {
	switch s {
	case QPStateReset:
		return "RESET"
	case QPStateInit:
		return "INIT"
	case QPStateRTR:
		return "RTR"
	case QPStateRTS:
		return "RTS"
	case QPStateError:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint32(s))
}

// QPAttrMask is enum ibv_qp_attr_mask: which QPAttr fields a Modify sets.
type QPAttrMask uint32

const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrQKey            QPAttrMask = 1 << 6
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCnt        QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxQPRDAtomic   QPAttrMask = 1 << 13
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRDAtomic QPAttrMask = 1 << 17
	QPAttrDestQPN         QPAttrMask = 1 << 20
)

// Access is enum ibv_access_flags.
type Access uint32

const (
	AccessLocalWrite  Access = 1
	AccessRemoteWrite Access = 2
	AccessRemoteRead  Access = 4
	// AccessRelaxedOrdering lets the HCA's PCIe writes to this MR pass one
	// another; see the ibverbs package for when that is safe.
	AccessRelaxedOrdering Access = 1 << 20
)

// Opcode is enum ibv_wr_opcode.
type Opcode uint32

const (
	OpRDMAWrite        Opcode = 0
	OpRDMAWriteWithImm Opcode = 1
	OpSend             Opcode = 2
	OpSendWithImm      Opcode = 3
	OpRDMARead         Opcode = 4
)

// SendFlags is enum ibv_send_flags.
type SendFlags uint32

const (
	SendFence     SendFlags = 1
	SendSignaled  SendFlags = 2
	SendSolicited SendFlags = 4
	SendInline    SendFlags = 8
)

// WCOpcode is enum ibv_wc_opcode.
type WCOpcode uint32

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
	wcRecvFlag        WCOpcode = 128
)

// WCFlagWithImm is IBV_WC_WITH_IMM in WC.Flags.
const WCFlagWithImm uint32 = 2

// IsRecv reports whether the completion is of a receive work request.
func (o WCOpcode) IsRecv() bool { return o&wcRecvFlag != 0 }

// WCStatus is enum ibv_wc_status.
type WCStatus uint32

// The statuses the backends tell apart; String names every one.
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCRemAbortErr    WCStatus = 17
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "WR flushed", "memory window bind error", "bad response error",
	"local access error", "remote invalid request error", "remote access error", "remote operation error",
	"transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error",
	"remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
	"TM error",
}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return fmt.Sprintf("status %d", uint32(s))
}

// LinkLayer is the port's link layer (IBV_LINK_LAYER_*).
type LinkLayer uint8

const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unspecified"
}

// MTU is enum ibv_mtu: 1 is 256 bytes, 5 is 4096.
type MTU uint32

// Bytes returns the MTU in bytes, 0 for an invalid value.
func (m MTU) Bytes() int {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// PortState is enum ibv_port_state.
type PortState uint32

// PortActive is IBV_PORT_ACTIVE.
const PortActive PortState = 4

func (s PortState) String() string {
	names := [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}
	if int(s) < len(names) {
		return names[s]
	}
	return fmt.Sprintf("PortState(%d)", uint32(s))
}

// QP kinds.
type QPKind int32

const (
	// QPKindRC is a reliable connected QP (ibv_create_qp, IBV_QPT_RC).
	QPKindRC QPKind = 0
	// QPKindSRD is an EFA scalable reliable datagram QP (efadv_create_qp_ex).
	QPKindSRD QPKind = 1
)

// Send-op capabilities of an extended QP (enum ibv_qp_create_send_ops_flags).
const (
	QPExWithRDMAWrite        uint64 = 1
	QPExWithRDMAWriteWithImm uint64 = 2
	QPExWithSend             uint64 = 4
	QPExWithSendWithImm      uint64 = 8
	QPExWithRDMARead         uint64 = 16
)

// EFA device capability bits (EFADV_DEVICE_ATTR_CAPS_*).
const (
	EFACapRDMARead             uint32 = 1 << 0
	EFACapRNRRetry             uint32 = 1 << 1
	EFACapCQWithSGID           uint32 = 1 << 2
	EFACapRDMAWrite            uint32 = 1 << 3
	EFACapUnsolicitedWriteRecv uint32 = 1 << 4
)

// DeviceInfo is one entry of ibv_get_device_list.
type DeviceInfo struct {
	Name          string
	GUID          uint64
	NodeType      int
	TransportType int
}

// DeviceAttr is the part of struct ibv_device_attr the backends use.
type DeviceAttr struct {
	FirmwareVersion   string
	NodeGUID          uint64
	VendorID          uint32
	VendorPartID      uint32
	HWVersion         uint32
	MaxMRSize         uint64
	MaxQP             int
	MaxQPWR           int
	MaxSGE            int
	MaxCQ             int
	MaxCQE            int
	MaxMR             int
	MaxPD             int
	MaxAH             int
	MaxQPRDAtom       int
	MaxQPInitRDAtom   int
	PhysicalPortCount int
}

// PortAttr is the part of struct ibv_port_attr the backends use.
type PortAttr struct {
	State        PortState
	MaxMTU       MTU
	ActiveMTU    MTU
	GIDTableLen  int
	PortCapFlags uint32
	MaxMsgSize   uint32
	LID          uint16
	SMLID        uint16
	LMC          uint8
	LinkLayer    LinkLayer
	ActiveWidth  uint8
	ActiveSpeed  uint8
	PhysState    uint8
}

// EFAAttr is struct efadv_device_attr.
type EFAAttr struct {
	MaxSQWR       uint32
	MaxRQWR       uint32
	MaxSQSGE      uint16
	MaxRQSGE      uint16
	InlineBufSize uint16
	DeviceCaps    uint32
	MaxRDMASize   uint32
}

// GID is a 128-bit port address (union ibv_gid).
type GID [16]byte

// IsZero reports whether g is all zero (an unused table entry).
func (g GID) IsZero() bool { return g == GID{} }

// IPv4Mapped reports whether g is ::ffff:a.b.c.d, the GID RoCE gives an
// IPv4 address.
func (g GID) IPv4Mapped() bool {
	for _, b := range g[:10] {
		if b != 0 {
			return false
		}
	}
	return g[10] == 0xff && g[11] == 0xff
}

// LinkLocal reports whether g is in fe80::/10 (the default GIDs a RoCE port
// gets from its MAC, and the IB port GID's form with the default prefix).
func (g GID) LinkLocal() bool { return g[0] == 0xfe && g[1]&0xc0 == 0x80 }

// SubnetPrefix is the upper 64 bits.
func (g GID) SubnetPrefix() uint64 {
	var p uint64
	for _, b := range g[:8] {
		p = p<<8 | uint64(b)
	}
	return p
}

func (g GID) String() string { return net.IP(g[:]).String() }

// GIDType is enum ibv_gid_type.
type GIDType uint32

const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint32(t))
}

// GIDEntry is one valid entry of a port's GID table.
type GIDEntry struct {
	Index int
	GID   GID
	Type  GIDType
	// NetDev is the network device a RoCE GID belongs to ("eth2",
	// "eth2.100"); empty for IB and when unknown.
	NetDev string
}

// SendWR is one send work request with at most one gather entry. Its layout
// is the C shim's mk_send_wr, so a slice of them is handed to C as is.
type SendWR struct {
	WRID       uint64
	LocalAddr  uint64
	RemoteAddr uint64
	// InlineValue is the payload of an 8-byte SendInline write (Length 8):
	// the provider copies it into the work queue entry, so no registered
	// source memory is needed.
	InlineValue uint64
	// AH addresses the peer on datagram (SRD) QPs.
	AH         AHHandle
	Length     uint32
	LKey       uint32
	RKey       uint32
	Imm        uint32 // host order
	Opcode     Opcode
	Flags      SendFlags
	RemoteQPN  uint32
	RemoteQKey uint32
}

// RecvWR is one receive work request with at most one scatter entry
// (Length 0: none, for immediates only).
type RecvWR struct {
	WRID   uint64
	Addr   uint64
	Length uint32
	LKey   uint32
}

// WC is one work completion (struct ibv_wc), the immediate in host order.
// Its layout is the C shim's mk_wc.
type WC struct {
	WRID      uint64
	Status    WCStatus
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32
	QPNum     uint32
	SrcQP     uint32
	Flags     uint32
	SLID      uint16
	SL        uint8
	_         [5]byte
}

// HasImm reports whether the completion carried an immediate.
func (w *WC) HasImm() bool { return w.Flags&WCFlagWithImm != 0 }

// AHHandle is an address handle as work requests carry it.
type AHHandle uintptr

// AHAttr is struct ibv_ah_attr.
type AHAttr struct {
	DGID         GID
	FlowLabel    uint32
	DLID         uint16
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	IsGlobal     bool
	SL           uint8
	SrcPathBits  uint8
	Port         uint8
	StaticRate   uint8
}

// QPAttr is the part of struct ibv_qp_attr the state machines set.
type QPAttr struct {
	AH              AHAttr
	State           QPState
	PathMTU         MTU
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	AccessFlags     Access
	PKeyIndex       uint16
	Port            uint8
	MaxRDAtomic     uint8
	MaxDestRDAtomic uint8
	MinRNRTimer     uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
}

// QPInit is what CreateQP needs.
type QPInit struct {
	Kind          QPKind
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
	// SendOps (SRD) is the QPExWith* set the QP must support.
	SendOps uint64
	// EFAFlags and EFASL (SRD) are efadv_qp_init_attr's flags and sl.
	EFAFlags uint16
	EFASL    uint8
}

// QPCaps is what the provider granted.
type QPCaps struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxInlineData uint32
}

// Features are the optional entry points a Library has.
type Features struct {
	DMABuf     bool // ibv_reg_dmabuf_mr (rdma-core >= 34)
	RegMRIOVA2 bool // ibv_reg_mr_iova2 (rdma-core >= 28): relaxed ordering
	GIDTable   bool // _ibv_query_gid_table (rdma-core >= 31)
	QPEx       bool // ibv_qp_to_qp_ex (rdma-core >= 24)
	EFA        bool // libefa loaded
}
