package efa

// DefaultQueue is the default number of ops in flight per peer.
const DefaultQueue = 128

// DefaultRecvPool is the default number of receive buffers posted on the QP
// (shared by all peers; every signal consumes one or two).
const DefaultRecvPool = 4096

// Option configures Open.
type Option func(*options)

type options struct {
	library    string
	efaLibrary string
	device     string
	port       int
	queue      int
	recvPool   int
	sl         uint8
}

func defaultOptions() options {
	return options{queue: DefaultQueue, recvPool: DefaultRecvPool}
}

// WithLibrary loads libibverbs from path instead of libibverbs.so.1.
func WithLibrary(path string) Option { return func(o *options) { o.library = path } }

// WithEFALibrary loads libefa from path instead of libefa.so.1.
func WithEFALibrary(path string) Option { return func(o *options) { o.efaLibrary = path } }

// WithDevice uses this device and port instead of the placement's first EFA
// NIC.
func WithDevice(name string, port int) Option {
	return func(o *options) { o.device, o.port = name, port }
}

// WithQueue sets the number of ops in flight per peer before Post pushes
// back (default DefaultQueue; capped by the device's queue sizes).
func WithQueue(n int) Option { return func(o *options) { o.queue = n } }

// WithRecvPool sets the number of receive buffers (default DefaultRecvPool;
// capped by the device's max_rq_wr).
func WithRecvPool(n int) Option { return func(o *options) { o.recvPool = n } }

// WithServiceLevel sets efadv_qp_init_attr.sl (8 selects the low-latency
// class on current EFA; libefa older than rdma-core 52 refuses any non-zero
// value).
func WithServiceLevel(sl uint8) Option { return func(o *options) { o.sl = sl } }
