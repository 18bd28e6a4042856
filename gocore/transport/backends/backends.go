// Package backends links every transport backend of this build into the registry; import
// it for its side effects where transport.Open must be able to choose any of them:
//
//	import _ "github.com/mkernel/mkernel/gocore/transport/backends"
//
// A new backend package adds its blank import here.
package backends

import (
	_ "github.com/mkernel/mkernel/gocore/transport/efa"
	_ "github.com/mkernel/mkernel/gocore/transport/ibverbs"
	_ "github.com/mkernel/mkernel/gocore/transport/loopback"
	_ "github.com/mkernel/mkernel/gocore/transport/plugin" // MKERNEL_NET_PLUGIN
	_ "github.com/mkernel/mkernel/gocore/transport/tcp"
)
