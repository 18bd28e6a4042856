package topology

// defaultNVMLLibrary is the soname the NVIDIA driver installs.
const defaultNVMLLibrary = "libnvidia-ml.so.1"

// NVMLOption configures an NVMLProber.
type NVMLOption func(*nvmlOptions)

type nvmlOptions struct {
	path string
}

// WithNVMLLibrary loads NVML from path instead of libnvidia-ml.so.1 found by
// the dynamic loader.
func WithNVMLLibrary(path string) NVMLOption {
	return func(o *nvmlOptions) { o.path = path }
}

func newNVMLOptions(opts []NVMLOption) nvmlOptions {
	o := nvmlOptions{path: defaultNVMLLibrary}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

var _ NVLinkProber = (*NVMLProber)(nil)
