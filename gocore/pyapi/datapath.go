package pyapi

import (
	"encoding/json"
	"fmt"
	"time"
	"unsafe"

	"github.com/mkernel/mkernel/gocore/datapath"
	"github.com/mkernel/mkernel/gocore/fifo"
	"github.com/mkernel/mkernel/gocore/internal/sessions"
	"github.com/mkernel/mkernel/gocore/transport"
)

// datapathConfig is DatapathCreate's JSON configuration.
type datapathConfig struct {
	// Buffers maps symmetric buffer ids (not 0) to their sizes in bytes.
	Buffers   map[uint32]int `json:"buffers"`
	FlagSlots int            `json:"flag_slots"`
	FIFOSlots int            `json:"fifo_slots"`
	Node      []int          `json:"node"`
	AllPeers  bool           `json:"all_peers"`
	Net       string         `json:"net"`
	TimeoutMs int            `json:"timeout_ms"`
	GPU       *int           `json:"gpu"`
}

// DatapathCreate opens this rank's inter-node data path over a session (collective:
// every rank calls it with the same buffer ids). configJSON is an object:
// {"buffers": {"1": 1048576}, "flag_slots": 4096, "fifo_slots": 1024,
// "node": [0, 0, 1, 1], "all_peers": false, "net": "tcp", "timeout_ms": 60000, "gpu": 0}
// ("gpu": the GPU whose topology placement picks the NICs and pins the proxy thread);
// every field but buffers is optional. It returns the data path's handle, shared with
// the C ABI.
func DatapathCreate(session int64, configJSON string) (int64, error) {
	var c datapathConfig
	if err := json.Unmarshal([]byte(configJSON), &c); err != nil {
		return 0, fmt.Errorf("data path config: %w", err)
	}
	cfg := datapath.Config{FlagSlots: c.FlagSlots, FIFOSlots: c.FIFOSlots, Node: c.Node, AllPeers: c.AllPeers,
		Net: transport.Selection{Name: c.Net}, Timeout: time.Duration(c.TimeoutMs) * time.Millisecond}
	if c.GPU != nil {
		p, err := sessions.PlacementOf(*c.GPU)
		if err != nil {
			return 0, err
		}
		cfg.Placement = p
	}
	for id, n := range c.Buffers {
		cfg.Buffers = append(cfg.Buffers, datapath.Buffer{ID: transport.BufferID(id), Bytes: n})
	}
	h, err := sessions.OpenDatapath(uint64(session), cfg)
	return int64(h), err
}

// DatapathBuffer returns {"address": int, "bytes": int} of buffer id in this process (id
// 0: the arrival flags, 8-byte words), e.g. for torch.frombuffer through ctypes.
func DatapathBuffer(handle int64, id int) (string, error) {
	dp, err := sessions.Datapath(uint64(handle))
	if err != nil {
		return "", err
	}
	b := dp.Buffer(transport.BufferID(id))
	if b == nil {
		return "", fmt.Errorf("data path %d has no buffer %d", handle, id)
	}
	out, err := json.Marshal(map[string]uint64{"address": uint64(uintptr(unsafe.Pointer(&b[0]))), "bytes": uint64(len(b))})
	return string(out), err
}

// DatapathFIFOAddress returns the address of the FIFO (an mk_fifo_ctrl, fifo.h).
func DatapathFIFOAddress(handle int64) (int64, error) {
	dp, err := sessions.Datapath(uint64(handle))
	if err != nil {
		return 0, err
	}
	return int64(uintptr(unsafe.Pointer(&dp.FIFOMemory()[0]))), nil
}

// DatapathCheck returns the data path's failure (naming the peer and slot), nil while
// it works.
func DatapathCheck(handle int64) error {
	dp, err := sessions.Datapath(uint64(handle))
	if err != nil {
		return err
	}
	return dp.Err()
}

// DatapathStatsJSON returns the proxy's diagnostics as JSON (see proxy.Stats).
func DatapathStatsJSON(handle int64) (string, error) {
	dp, err := sessions.Datapath(uint64(handle))
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(dp.Stats())
	return string(b), err
}

// pushCmd is DatapathPush's JSON command (fifo.h's mk_fifo_cmd; kind is "write",
// "write_signal", "fence" or "barrier").
type pushCmd struct {
	Kind        string `json:"kind"`
	Peer        int    `json:"peer"`
	LocalBuf    uint32 `json:"local_buf"`
	LocalOff    uint64 `json:"local_off"`
	RemoteBuf   uint32 `json:"remote_buf"`
	RemoteOff   uint64 `json:"remote_off"`
	Bytes       uint64 `json:"bytes"`
	ArrivalSlot uint32 `json:"arrival_slot"`
	ArrivalSeq  uint64 `json:"arrival_seq"`
}

// DatapathPush pushes one command (JSON) into the FIFO with the host producer protocol
// and returns its ticket. It costs microseconds per call: for tests and debugging; ops
// push from C++ with fifo.h.
func DatapathPush(handle int64, cmdJSON string, timeoutMs int) (int64, error) {
	dp, err := sessions.Datapath(uint64(handle))
	if err != nil {
		return 0, err
	}
	var c pushCmd
	if err := json.Unmarshal([]byte(cmdJSON), &c); err != nil {
		return 0, fmt.Errorf("fifo command: %w", err)
	}
	kinds := map[string]fifo.Kind{"write": fifo.KindWrite, "write_signal": fifo.KindWriteSignal, "fence": fifo.KindFence, "barrier": fifo.KindBarrier}
	k, ok := kinds[c.Kind]
	if !ok {
		return 0, fmt.Errorf("fifo command: kind %q (write, write_signal, fence, barrier)", c.Kind)
	}
	peer := uint16(c.Peer)
	if c.Peer < 0 {
		peer = fifo.PeerAll
	}
	cmd := fifo.Cmd{Kind: k, Peer: peer, LocalBuf: c.LocalBuf, LocalOff: c.LocalOff, RemoteBuf: c.RemoteBuf, RemoteOff: c.RemoteOff,
		Bytes: c.Bytes, ArrivalSlot: c.ArrivalSlot, ArrivalSeq: c.ArrivalSeq, EnqueueNS: fifo.MonotonicNanos()}
	ticket, err := dp.Ring().Push(&cmd, sessions.Timeout(int64(timeoutMs)))
	if err != nil {
		if perr := dp.Err(); perr != nil {
			return 0, fmt.Errorf("push: %w (the proxy stopped: %w)", err, perr)
		}
		return 0, fmt.Errorf("push ticket %d: %w", ticket, err)
	}
	return int64(ticket), nil
}

// DatapathWaitFlag waits until arrival flag slot holds at least seq, or fails naming
// the data path's failure.
func DatapathWaitFlag(handle int64, slot int, seq int64, timeoutMs int) error {
	dp, err := sessions.Datapath(uint64(handle))
	if err != nil {
		return err
	}
	if slot < 0 || (slot+1)*fifo.FlagBytes > len(dp.Flags()) {
		return fmt.Errorf("flag slot %d out of range", slot)
	}
	deadline := time.Now().Add(sessions.Timeout(int64(timeoutMs)))
	for {
		if err := fifo.WaitFlag(dp.Flag(slot), uint64(seq), 10*time.Millisecond); err == nil {
			return nil
		}
		if err := dp.Err(); err != nil {
			return fmt.Errorf("waiting for flag %d >= %d: %w", slot, seq, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("flag %d holds %d after %d ms, want >= %d", slot, *dp.Flag(slot), timeoutMs, seq)
		}
	}
}

// DatapathDestroy closes the data path (producers must have stopped).
func DatapathDestroy(handle int64) error { return sessions.DestroyDatapath(uint64(handle)) }
