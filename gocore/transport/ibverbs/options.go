package ibverbs

// DefaultQueue is the default number of ops in flight per peer (each takes
// at most two send queue entries).
const DefaultQueue = 256

// Option configures Open.
type Option func(*options)

type options struct {
	library      string
	device       string
	port         int
	gidIndex     int
	queue        int
	relaxed      bool
	trafficClass uint8
	sl           uint8
	sysfsRoot    string
}

func defaultOptions() options {
	return options{gidIndex: -1, queue: DefaultQueue}
}

// WithLibrary loads libibverbs from path instead of the dynamic loader's
// libibverbs.so.1 (tests use a fake provider library).
func WithLibrary(path string) Option { return func(o *options) { o.library = path } }

// WithDevice uses this device and port instead of the placement's first
// ibverbs NIC.
func WithDevice(name string, port int) Option {
	return func(o *options) { o.device, o.port = name, port }
}

// WithGIDIndex uses this GID table index instead of SelectGID's choice (the
// equivalent of NCCL_IB_GID_INDEX, for fabrics whose RDMA traffic runs on a
// VLAN netdev, for instance).
func WithGIDIndex(i int) Option { return func(o *options) { o.gidIndex = i } }

// WithQueue sets the number of ops in flight per peer before Post pushes
// back (default DefaultQueue; capped by the device's queue sizes).
func WithQueue(n int) Option { return func(o *options) { o.queue = n } }

// WithRelaxedOrdering registers data with IBV_ACCESS_RELAXED_ORDERING, so the
// HCA's PCIe writes may pass each other (faster on some CPUs and in VMs). Each
// region then gets a second MR without it, and flag writes use that one: a
// strictly ordered PCIe write cannot pass the relaxed writes before it, so the
// signal contract still holds.
func WithRelaxedOrdering(on bool) Option { return func(o *options) { o.relaxed = on } }

// WithTrafficClass sets the RoCE traffic class (DSCP << 2 | ECN) of the
// GRH, for fabrics that classify RDMA traffic by DSCP.
func WithTrafficClass(tc uint8) Option { return func(o *options) { o.trafficClass = tc } }

// WithServiceLevel sets the IB service level (and RoCE priority).
func WithServiceLevel(sl uint8) Option { return func(o *options) { o.sl = sl } }

// WithSysfsRoot reads sysfs (GID table fallback, port netdev) under root
// instead of /sys.
func WithSysfsRoot(root string) Option { return func(o *options) { o.sysfsRoot = root } }
