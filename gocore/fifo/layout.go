package fifo

import "unsafe"

// Field is one entry of the layout table the cgo test compares with the C compiler's.
type Field struct {
	Name   string
	Offset uintptr
}

// Layout lists sizes and offsets as Go sees them; names match the C test's table.
func Layout() []Field {
	var c Cmd
	var k Ctrl
	return []Field{
		{"sizeof(mk_fifo_cmd)", unsafe.Sizeof(c)},
		{"mk_fifo_cmd.seq", unsafe.Offsetof(c.Seq)},
		{"mk_fifo_cmd.kind", unsafe.Offsetof(c.Kind)},
		{"mk_fifo_cmd.flags", unsafe.Offsetof(c.Flags)},
		{"mk_fifo_cmd.peer", unsafe.Offsetof(c.Peer)},
		{"mk_fifo_cmd.arrival_slot", unsafe.Offsetof(c.ArrivalSlot)},
		{"mk_fifo_cmd.local_buf", unsafe.Offsetof(c.LocalBuf)},
		{"mk_fifo_cmd.remote_buf", unsafe.Offsetof(c.RemoteBuf)},
		{"mk_fifo_cmd.local_off", unsafe.Offsetof(c.LocalOff)},
		{"mk_fifo_cmd.remote_off", unsafe.Offsetof(c.RemoteOff)},
		{"mk_fifo_cmd.bytes", unsafe.Offsetof(c.Bytes)},
		{"mk_fifo_cmd.arrival_seq", unsafe.Offsetof(c.ArrivalSeq)},
		{"mk_fifo_cmd.enqueue_ns", unsafe.Offsetof(c.EnqueueNS)},
		{"sizeof(mk_fifo_ctrl)", unsafe.Sizeof(k)},
		{"mk_fifo_ctrl.magic", unsafe.Offsetof(k.Magic)},
		{"mk_fifo_ctrl.version", unsafe.Offsetof(k.Version)},
		{"mk_fifo_ctrl.cmd_bytes", unsafe.Offsetof(k.CmdBytes)},
		{"mk_fifo_ctrl.capacity", unsafe.Offsetof(k.Capacity)},
		{"mk_fifo_ctrl.clock", unsafe.Offsetof(k.Clock)},
		{"mk_fifo_ctrl.head", unsafe.Offsetof(k.Head)},
		{"mk_fifo_ctrl.tail", unsafe.Offsetof(k.Tail)},
		{"mk_fifo_ctrl.done", unsafe.Offsetof(k.Done)},
		{"mk_fifo_ctrl.error", unsafe.Offsetof(k.Error)},
		{"mk_fifo_ctrl.error_peer", unsafe.Offsetof(k.ErrorPeer)},
		{"mk_fifo_ctrl.error_ticket", unsafe.Offsetof(k.ErrorTicket)},
		{"mk_fifo_ctrl.error_state", unsafe.Offsetof(k.ErrorState)},
		{"MK_FIFO_MAGIC", Magic},
		{"MK_FIFO_VERSION", Version},
		{"MK_FIFO_PEER_ALL", PeerAll},
		{"MK_FIFO_WRITE", uintptr(KindWrite)},
		{"MK_FIFO_WRITE_SIGNAL", uintptr(KindWriteSignal)},
		{"MK_FIFO_FENCE", uintptr(KindFence)},
		{"MK_FIFO_BARRIER", uintptr(KindBarrier)},
		{"MK_FIFO_CLOCK_MONOTONIC", uintptr(ClockMonotonic)},
		{"MK_FIFO_CLOCK_GLOBALTIMER", uintptr(ClockGlobaltimer)},
		{"MK_FIFO_ERR_PRODUCER", ErrProducer},
		{"MK_FIFO_ERR_PROXY", ErrProxy},
		{"MK_FIFO_ERR_CLOSED", ErrClosed},
		{"MK_FIFO_MAX_CAPACITY", MaxCapacity},
		{"MK_FIFO_ERROR_FREE", ErrorFree},
		{"MK_FIFO_ERROR_CLAIMED", ErrorClaimed},
		{"MK_FIFO_ERROR_SET", ErrorSet},
		{"mk_fifo_ctrl.format", unsafe.Offsetof(k.Format)},
		{"sizeof(mk_fifo_ll_entry)", unsafe.Sizeof(LLEntry{})},
		{"MK_FIFO_LL_WORDS", LLWords},
		{"MK_FIFO_FORMAT_LL", uintptr(FormatLL)},
	}
}
