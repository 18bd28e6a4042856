package bootstrap

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Limits and defaults.
const (
	MaxWorld    = 4096     // largest world size
	MaxBlobSize = 16 << 20 // largest blob one rank may pass to AllGather, in bytes

	DefaultTimeout           = 5 * time.Minute  // rendezvous and each collective
	DefaultHeartbeatInterval = 5 * time.Second  // an idle connection sends a ping this often
	DefaultHeartbeatTimeout  = 60 * time.Second // a connection silent this long is dead
)

// Internal bounds. They are not options: none of them limits what a job can do, they only
// bound how long a broken or hostile connection can hold resources.
const (
	handshakeTimeout = 10 * time.Second // one connection's authentication, root and rank side
	closeTimeout     = 5 * time.Second  // Close waits this long for farewells to flush
	lingerTimeout    = 2 * time.Second  // after its last frame, a link waits this long for the other side to close
	abortGrace       = 2 * time.Second  // a rank that timed out waits this long for the root's verdict
	maxHandshakes    = 1024             // connections the root authenticates at once
)

// Option configures Listen, Join and New.
type Option func(*options)

type options struct {
	timeout       time.Duration
	log           *zap.Logger
	listenAddr    string
	advertiseHost string
	secret        []byte
	hbInterval    time.Duration
	hbTimeout     time.Duration
	listenAny     bool // New: the caller named the root address, so an unspecified host is fine
}

// WithTimeout bounds the rendezvous (Accept, Join) and each collective (AllGather, Barrier);
// a context deadline, if earlier, applies too. Default DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// WithLogger sets the logger (default: none). The package logs at Info the rendezvous, at
// Warn every rejected connection, at Error a failed session.
func WithLogger(l *zap.Logger) Option { return func(o *options) { o.log = l } }

// WithListenAddr sets the "host:port" the root binds (Listen only). Port 0 picks a free
// port. Default: MKERNEL_BOOTSTRAP_ADDR, else MASTER_ADDR with port 0, else 127.0.0.1:0.
// An unspecified host (0.0.0.0, ::) binds every interface and needs WithAdvertiseHost.
func WithListenAddr(hostport string) Option { return func(o *options) { o.listenAddr = hostport } }

// WithAdvertiseHost sets the host written into the ID (Listen only), for a root bound to
// every interface or reachable under another name. Default: the bound IP.
func WithAdvertiseHost(host string) Option { return func(o *options) { o.advertiseHost = host } }

// WithSecret sets the job secret (Listen only, SecretMinLen..SecretMaxLen bytes). Default:
// SecretLen fresh random bytes.
func WithSecret(secret []byte) Option {
	return func(o *options) { o.secret = append([]byte(nil), secret...) }
}

// WithHeartbeat sets how often an idle connection pings and how long a silent connection
// lives (timeout must be at least twice interval). WithHeartbeat(0, 0) turns liveness
// checks off: a peer that vanishes without closing its socket is then found only by the
// collective timeouts. Defaults DefaultHeartbeatInterval, DefaultHeartbeatTimeout.
func WithHeartbeat(interval, timeout time.Duration) Option {
	return func(o *options) { o.hbInterval, o.hbTimeout = interval, timeout }
}

func withListenAny() Option { return func(o *options) { o.listenAny = true } }

func newOptions(opts []Option) (options, error) {
	o := options{
		timeout:    DefaultTimeout,
		hbInterval: DefaultHeartbeatInterval,
		hbTimeout:  DefaultHeartbeatTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = zap.NewNop()
	}
	switch {
	case o.timeout <= 0:
		return o, fmt.Errorf("bootstrap: timeout %v must be positive", o.timeout)
	case o.hbInterval < 0 || o.hbTimeout < 0:
		return o, fmt.Errorf("bootstrap: negative heartbeat %v/%v", o.hbInterval, o.hbTimeout)
	case (o.hbInterval == 0) != (o.hbTimeout == 0):
		return o, fmt.Errorf("bootstrap: heartbeat interval %v and timeout %v must be both zero or both positive", o.hbInterval, o.hbTimeout)
	case o.hbTimeout < 2*o.hbInterval:
		return o, fmt.Errorf("bootstrap: heartbeat timeout %v must be at least twice the interval %v", o.hbTimeout, o.hbInterval)
	}
	if o.secret != nil {
		if err := checkSecret(o.secret); err != nil {
			return o, fmt.Errorf("bootstrap: %w", err)
		}
	}
	return o, nil
}
