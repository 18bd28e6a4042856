package bootstrap

import (
	"context"
	"fmt"
	"time"
)

// Config describes one rank of a standalone job, where every rank knows the root's address
// in advance (Go tests, C++ and other non-torch users). Under torchrun, use Listen and Join
// and publish the ID through the torch.distributed store instead.
type Config struct {
	Rank     int           // 0..World-1; rank 0 is the root
	World    int           // 1..MaxWorld
	RootAddr string        // "host:port" rank 0 listens on and the others dial; optional if World == 1
	Secret   []byte        // job secret, SecretMinLen..SecretMaxLen bytes, the same on every rank; optional if World == 1
	Timeout  time.Duration // rendezvous and collective timeout; 0: DefaultTimeout
}

func (c Config) validate() error {
	switch {
	case c.World < 1 || c.World > MaxWorld:
		return fmt.Errorf("bootstrap: config: world size %d outside 1..%d", c.World, MaxWorld)
	case c.Rank < 0 || c.Rank >= c.World:
		return fmt.Errorf("bootstrap: config: rank %d outside 0..%d", c.Rank, c.World-1)
	case c.Timeout < 0:
		return fmt.Errorf("bootstrap: config: negative timeout %v", c.Timeout)
	}
	if c.World > 1 || c.RootAddr != "" {
		if err := checkAddr(c.RootAddr); err != nil {
			return fmt.Errorf("bootstrap: config: root %w", err)
		}
	}
	if c.World > 1 || c.Secret != nil {
		if err := checkSecret(c.Secret); err != nil {
			return fmt.Errorf("bootstrap: config: %w", err)
		}
	}
	return nil
}

// New joins the job cfg describes and returns this rank's session once every rank has
// joined: rank 0 listens on cfg.RootAddr and accepts, the others dial it. cfg.Timeout, if
// set, is applied before opts.
func New(ctx context.Context, cfg Config, opts ...Option) (*Session, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout > 0 {
		opts = append([]Option{WithTimeout(cfg.Timeout)}, opts...)
	}
	if cfg.Rank != 0 {
		id, err := NewID(cfg.RootAddr, cfg.Secret)
		if err != nil {
			return nil, err
		}
		return Join(ctx, id, cfg.Rank, cfg.World, opts...)
	}
	addr := cfg.RootAddr
	if addr == "" {
		addr = "127.0.0.1:0" // World == 1: nobody dials it
	}
	opts = append(opts, WithListenAddr(addr), withListenAny())
	if cfg.Secret != nil {
		opts = append(opts, WithSecret(cfg.Secret))
	}
	root, err := Listen(ctx, cfg.World, opts...)
	if err != nil {
		return nil, err
	}
	s, err := root.Accept(ctx)
	if err != nil {
		return nil, err
	}
	return s, nil
}
