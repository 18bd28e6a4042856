package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Sentinel errors. Every error the package returns wraps at most one of them; match with
// errors.Is. Errors caused by a context also match context.Canceled or
// context.DeadlineExceeded.
var (
	// ErrTimeout: a rendezvous or collective did not finish within its timeout (or the
	// context's deadline). The message names the ranks that were missing.
	ErrTimeout = errors.New("bootstrap: timed out")
	// ErrPeerGone: another rank (or the root) disconnected, closed its session or abandoned
	// a collective. The message names it.
	ErrPeerGone = errors.New("bootstrap: peer gone")
	// ErrAuth: the two ends of a connection do not share the job secret.
	ErrAuth = errors.New("bootstrap: authentication failed")
	// ErrClosed: the session was closed by its owner.
	ErrClosed = errors.New("bootstrap: session closed")
	// ErrTooLarge: a blob passed to AllGather exceeds MaxBlobSize.
	ErrTooLarge = errors.New("bootstrap: blob too large")
	// ErrProtocol: the other end is not an mkernel bootstrap endpoint of this version, or
	// it sent a malformed or unexpected frame.
	ErrProtocol = errors.New("bootstrap: protocol error")
)

// kind classifies a failure; it crosses the wire as one byte so that every rank's error
// matches the same sentinel as the root's.
type kind uint8

const (
	kindOther kind = iota
	kindTimeout
	kindPeerGone
	kindAuth
	kindTooLarge
	kindProtocol
	kindLeft   // a rank closed its session: the normal end of a job, still ErrPeerGone
	kindClosed // local only: the owner closed the session; never sent
)

func (k kind) sentinel() error {
	switch k {
	case kindTimeout:
		return ErrTimeout
	case kindPeerGone, kindLeft:
		return ErrPeerGone
	case kindAuth:
		return ErrAuth
	case kindTooLarge:
		return ErrTooLarge
	case kindProtocol:
		return ErrProtocol
	case kindClosed:
		return ErrClosed
	}
	return nil
}

// wireKind maps a kind received from the network to one we know; unknown values (a newer
// peer) degrade to kindOther, and kindClosed is never accepted from outside.
func wireKind(b byte) kind {
	if k := kind(b); k < kindClosed {
		return k
	}
	return kindOther
}

// kindOf finds the kind of an error built by this package or by a context.
func kindOf(err error) kind {
	for k := kindTimeout; k <= kindClosed; k++ {
		if errors.Is(err, k.sentinel()) {
			return k
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return kindTimeout
	}
	return kindOther
}

// sessionError is the concrete error type behind every failure of a session: a complete
// message, the sentinel it matches (through kind) and, optionally, the error that caused it
// (a context error or a network error) for errors.Is/As.
type sessionError struct {
	kind  kind
	msg   string
	cause error
}

func (e *sessionError) Error() string { return e.msg }

func (e *sessionError) Is(target error) bool {
	s := e.kind.sentinel()
	return s != nil && target == s
}

func (e *sessionError) Unwrap() error { return e.cause }

func newError(k kind, cause error, format string, args ...any) *sessionError {
	return &sessionError{kind: k, msg: fmt.Sprintf(format, args...), cause: cause}
}

// ctxKind is the kind of a failure caused by ctx ending: a deadline is a timeout, a
// cancellation is not.
func ctxKind(ctx context.Context) kind {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return kindTimeout
	}
	return kindOther
}

// maxListedRanks bounds how many ranks an error message lists (runs are shortened to a-b
// first), so that a message about 4096 ranks still fits in one error frame.
const maxListedRanks = 64

// formatRanks renders sorted ranks as "[3 7 9-12]".
func formatRanks(ranks []int) string {
	var b strings.Builder
	b.WriteByte('[')
	items := 0
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if items == maxListedRanks {
			fmt.Fprintf(&b, " ... %d more", len(ranks)-i)
			break
		}
		if items > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(ranks[i]))
		switch {
		case j-i >= 2:
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(ranks[j]))
		case j-i == 1:
			j = i // a pair is listed as two items
		}
		items++
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}
