package plugin

import (
	"errors"
	"fmt"
	"net/rpc"

	hplugin "github.com/hashicorp/go-plugin"

	"github.com/mkernel/mkernel/gocore/topology"
	"github.com/mkernel/mkernel/gocore/transport"
)

// Handshake is the versioned handshake both sides must match. ProtocolVersion changes
// whenever the RPC messages or the shared ring layout change.
var Handshake = hplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "MKERNEL_NET_PLUGIN_COOKIE",
	MagicCookieValue: "7f3c1e9a-mkernel-transport-plugin",
}

// pluginName is the name of the one plugin a binary serves.
const pluginName = "transport"

// Error kinds: sentinels survive the RPC boundary as numbers.
var kinds = []error{nil, transport.ErrInvalid, transport.ErrNotSupported, transport.ErrPeerGone, transport.ErrTimeout,
	transport.ErrAuth, transport.ErrProtocol, transport.ErrClosed}

// Status carries an error across RPC.
type Status struct {
	Kind int
	Msg  string
}

func statusOf(err error) Status {
	if err == nil {
		return Status{}
	}
	for i, k := range kinds[1:] {
		if errors.Is(err, k) {
			return Status{Kind: i + 1, Msg: err.Error()}
		}
	}
	return Status{Kind: -1, Msg: err.Error()}
}

func (s Status) err() error {
	switch {
	case s.Kind == 0:
		return nil
	case s.Kind > 0 && s.Kind < len(kinds):
		return fmt.Errorf("%w (in plugin): %s", kinds[s.Kind], s.Msg)
	}
	return fmt.Errorf("transport plugin: %s", s.Msg)
}

// InitArgs opens the plugin's transport.
type InitArgs struct {
	Rank, World int
	Node        []int
	AllPeers    bool
	Key         []byte
	Placement   *topology.Placement
	BindHost    string
	RouteTo     string
	TimeoutNS   int64
	RingPath    string
	RingBytes   int
}

// InitReply describes it.
type InitReply struct {
	Status
	Name string
	Caps transport.Caps
}

// RegisterArgs registers a region by its shared file.
type RegisterArgs struct {
	ID     transport.BufferID
	Path   string
	Offset uint64
	Len    uint64
}

// BlobReply carries the plugin transport's address.
type BlobReply struct {
	Status
	Blob []byte
}

// ConnectArgs connects the plugin transport.
type ConnectArgs struct {
	Blobs     [][]byte
	TimeoutNS int64
}

// Empty is an argument or reply without content.
type Empty struct{}

// rpcServer is the net/rpc face of a server.
type rpcServer struct{ s *server }

func (r *rpcServer) Init(a InitArgs, reply *InitReply) error {
	name, caps, err := r.s.init(a)
	*reply = InitReply{Status: statusOf(err), Name: name, Caps: caps}
	return nil
}

func (r *rpcServer) Register(a RegisterArgs, reply *Status) error {
	*reply = statusOf(r.s.register(a))
	return nil
}

func (r *rpcServer) Address(_ Empty, reply *BlobReply) error {
	b, err := r.s.address()
	*reply = BlobReply{Status: statusOf(err), Blob: b}
	return nil
}

func (r *rpcServer) Connect(a ConnectArgs, reply *Status) error {
	*reply = statusOf(r.s.connect(a))
	return nil
}

func (r *rpcServer) Failure(_ Empty, reply *Status) error {
	*reply = statusOf(r.s.failure())
	return nil
}

func (r *rpcServer) Close(_ Empty, reply *Status) error {
	*reply = statusOf(r.s.close())
	return nil
}

// rpcPlugin is the go-plugin glue (net/rpc protocol).
type rpcPlugin struct{ srv *server }

func (p *rpcPlugin) Server(*hplugin.MuxBroker) (any, error) { return &rpcServer{s: p.srv}, nil }
func (p *rpcPlugin) Client(_ *hplugin.MuxBroker, c *rpc.Client) (any, error) {
	return &rpcClient{c: c}, nil
}

// rpcClient calls the server.
type rpcClient struct{ c *rpc.Client }

func (c *rpcClient) call(method string, args, reply any) error {
	if err := c.c.Call("Plugin."+method, args, reply); err != nil {
		return fmt.Errorf("%w: plugin call %s: %w", transport.ErrPeerGone, method, err)
	}
	return nil
}
