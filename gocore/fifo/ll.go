package fifo

import "sync/atomic"

// The LL slot format (fifo.h, "The LL slot format"): a command is LLWords 8-byte words,
// each 32 bits of payload (Cmd's bytes 8..63 in order) under the tag uint32(ticket+1).
// The consumer has a command only when every word carries its ticket's tag: a producer's
// stores may land in any order, and no publication store or fence is needed.

// llTag is mk_fifo_ll_tag: never 0 in the first lap (zeroed memory is not a command) and
// never the previous lap's tag (ticket - capacity).
func llTag(ticket uint64) uint32 { return uint32(ticket + 1) }

// llPayload is mk_fifo_ll_payload.
func llPayload(c *Cmd, p *[LLWords]uint32) {
	p[0] = uint32(c.Kind) | uint32(c.Flags)<<8 | uint32(c.Peer)<<16
	p[1] = c.ArrivalSlot
	p[2] = c.LocalBuf
	p[3] = c.RemoteBuf
	p[4], p[5] = uint32(c.LocalOff), uint32(c.LocalOff>>32)
	p[6], p[7] = uint32(c.RemoteOff), uint32(c.RemoteOff>>32)
	p[8], p[9] = uint32(c.Bytes), uint32(c.Bytes>>32)
	p[10], p[11] = uint32(c.ArrivalSeq), uint32(c.ArrivalSeq>>32)
	p[12], p[13] = uint32(c.EnqueueNS), uint32(c.EnqueueNS>>32)
}

// llPublish writes cmd (its Seq ignored) as ticket's entry: LLWords atomic stores, in any
// order (the consumer checks each word).
func llPublish(e *LLEntry, ticket uint64, cmd *Cmd) {
	var p [LLWords]uint32
	llPayload(cmd, &p)
	tag := uint64(llTag(ticket)) << 32
	for i := range LLWords {
		atomic.StoreUint64(&e[i], tag|uint64(p[i]))
	}
}

// llDecode loads each word of e once; if every one carries ticket's tag it fills *out
// (Seq = ticket+1) and reports true. On any stale word it reports false and the caller
// must not use *out.
func llDecode(e *LLEntry, ticket uint64, out *Cmd) bool {
	tag := llTag(ticket)
	var p [LLWords]uint32
	for i := range LLWords {
		w := atomic.LoadUint64(&e[i])
		if uint32(w>>32) != tag {
			return false
		}
		p[i] = uint32(w)
	}
	out.Seq = ticket + 1
	out.Kind, out.Flags, out.Peer = Kind(p[0]), uint8(p[0]>>8), uint16(p[0]>>16)
	out.ArrivalSlot, out.LocalBuf, out.RemoteBuf = p[1], p[2], p[3]
	out.LocalOff = uint64(p[4]) | uint64(p[5])<<32
	out.RemoteOff = uint64(p[6]) | uint64(p[7])<<32
	out.Bytes = uint64(p[8]) | uint64(p[9])<<32
	out.ArrivalSeq = uint64(p[10]) | uint64(p[11])<<32
	out.EnqueueNS = uint64(p[12]) | uint64(p[13])<<32
	return true
}

// ready reports whether ticket pos is published, without copying it (any goroutine:
// diagnostics such as Depth).
func (r *Ring) ready(pos uint64) bool {
	if r.format == FormatLL {
		e, tag := &r.ll[pos&r.mask], llTag(pos)
		for i := range LLWords {
			if uint32(atomic.LoadUint64(&e[i])>>32) != tag {
				return false
			}
		}
		return true
	}
	return atomic.LoadUint64(&r.slots[pos&r.mask].Seq) == pos+1
}
