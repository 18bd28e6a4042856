package pyapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/mkernel/mkernel/gocore/internal/sessions"
)

// BootstrapListen starts the rendezvous of a job of world ranks on host
// (rank 0 only) and returns the job id to publish to the other ranks.
func BootstrapListen(host string, world int) (string, error) {
	return sessions.Listen(host, world)
}

// SessionCreate joins the job named by id as rank of world; it returns the
// session handle, shared with the C ABI.
func SessionCreate(id string, rank, world int, timeoutMs int) (int64, error) {
	h, err := sessions.Create(id, rank, world, sessions.Timeout(int64(timeoutMs)))
	return int64(h), err
}

// SessionCreateFromEnv joins the standalone rendezvous described by
// MKERNEL_RANK, MKERNEL_WORLD_SIZE, MKERNEL_BOOTSTRAP_ADDR and MKERNEL_JOB_SECRET.
func SessionCreateFromEnv(timeoutMs int) (int64, error) {
	h, err := sessions.CreateFromEnv(sessions.Timeout(int64(timeoutMs)))
	return int64(h), err
}

// SessionRank returns this process's rank in the session.
func SessionRank(handle int64) (int, error) {
	s, err := sessions.Session(uint64(handle))
	if err != nil {
		return 0, err
	}
	return s.Rank(), nil
}

// SessionWorld returns the session's number of ranks.
func SessionWorld(handle int64) (int, error) {
	s, err := sessions.Session(uint64(handle))
	if err != nil {
		return 0, err
	}
	return s.World(), nil
}

// SessionAllGather all-gathers one blob (base64 text) per rank and returns
// a JSON array of the ranks' blobs (base64), in rank order.
func SessionAllGather(handle int64, blobBase64 string, timeoutMs int) (string, error) {
	blob, err := base64.StdEncoding.DecodeString(blobBase64)
	if err != nil {
		return "", fmt.Errorf("all-gather: blob is not base64: %w", err)
	}
	out, err := sessions.AllGather(uint64(handle), blob, sessions.Timeout(int64(timeoutMs)))
	if err != nil {
		return "", err
	}
	enc := make([]string, len(out))
	for i, b := range out {
		enc[i] = base64.StdEncoding.EncodeToString(b)
	}
	js, err := json.Marshal(enc)
	return string(js), err
}

// SessionBarrier waits until every rank reaches the barrier.
func SessionBarrier(handle int64, timeoutMs int) error {
	return sessions.Barrier(uint64(handle), sessions.Timeout(int64(timeoutMs)))
}

// SessionDestroy closes the session.
func SessionDestroy(handle int64) error { return sessions.Destroy(uint64(handle)) }

// Shutdown closes every session of the process.
func Shutdown() { sessions.CloseAll() }
