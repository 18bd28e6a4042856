// Command mkernel-net-tcp serves the tcp transport backend as an out-of-process plugin:
// MKERNEL_NET_PLUGIN=/path/to/mkernel-net-tcp selects it.
package main

import (
	"github.com/mkernel/mkernel/gocore/transport/plugin"
	"github.com/mkernel/mkernel/gocore/transport/tcp"
)

func main() { plugin.Serve(tcp.Backend{}) }
