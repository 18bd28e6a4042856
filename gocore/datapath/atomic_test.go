package datapath_test

import "sync/atomic"

func fifoLoad(p *uint64) uint64 { return atomic.LoadUint64(p) }
