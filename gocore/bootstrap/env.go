package bootstrap

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// The package's environment variables, read in this file and nowhere else.
const (
	envRank      = "MKERNEL_RANK"              // else RANK (torchrun)
	envWorld     = "MKERNEL_WORLD_SIZE"        // else WORLD_SIZE (torchrun)
	envAddr      = "MKERNEL_BOOTSTRAP_ADDR"    // root's host:port
	envSecret    = "MKERNEL_JOB_SECRET"        // hex, at least SecretMinLen bytes
	envTimeout   = "MKERNEL_BOOTSTRAP_TIMEOUT" // optional, Go duration ("90s")
	envTorchRank = "RANK"
	envTorchSize = "WORLD_SIZE"
	envMaster    = "MASTER_ADDR" // Listen's default interface only; MASTER_PORT is torch's store
)

// ConfigFromEnv reads a standalone job's Config from the environment:
//
//	MKERNEL_RANK, MKERNEL_WORLD_SIZE   this rank and the world size (else RANK, WORLD_SIZE)
//	MKERNEL_BOOTSTRAP_ADDR             root's "host:port" (required when the world size > 1)
//	MKERNEL_JOB_SECRET                 job secret in hex, 16..64 bytes (required), e.g. from
//	                                   `openssl rand -hex 32`, the same on every rank
//	MKERNEL_BOOTSTRAP_TIMEOUT          optional timeout, a Go duration such as "90s"
func ConfigFromEnv() (Config, error) { return configFromEnv(os.LookupEnv) }

func configFromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(names ...string) (string, string) {
		for _, n := range names {
			if v, ok := lookup(n); ok && strings.TrimSpace(v) != "" {
				return n, strings.TrimSpace(v)
			}
		}
		return names[0], ""
	}
	integer := func(names ...string) (int, error) {
		n, v := get(names...)
		if v == "" {
			return 0, fmt.Errorf("bootstrap: environment: %s is not set", strings.Join(names, " or "))
		}
		i, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("bootstrap: environment: %s=%q is not an integer", n, v)
		}
		return i, nil
	}
	var cfg Config
	var err error
	if cfg.Rank, err = integer(envRank, envTorchRank); err != nil {
		return Config{}, err
	}
	if cfg.World, err = integer(envWorld, envTorchSize); err != nil {
		return Config{}, err
	}
	if _, cfg.RootAddr = get(envAddr); cfg.RootAddr == "" && cfg.World > 1 {
		return Config{}, fmt.Errorf("bootstrap: environment: %s is not set (the root's host:port)", envAddr)
	}
	_, secret := get(envSecret)
	if secret == "" {
		return Config{}, fmt.Errorf("bootstrap: environment: %s is not set (the job secret, %d..%d bytes in hex, e.g. from `openssl rand -hex 32`)", envSecret, SecretMinLen, SecretMaxLen)
	}
	if cfg.Secret, err = hex.DecodeString(secret); err != nil {
		return Config{}, fmt.Errorf("bootstrap: environment: %s is not hex: %w", envSecret, err)
	}
	if err := checkSecret(cfg.Secret); err != nil {
		return Config{}, fmt.Errorf("bootstrap: environment: %s: %w", envSecret, err)
	}
	if _, v := get(envTimeout); v != "" {
		if cfg.Timeout, err = time.ParseDuration(v); err != nil || cfg.Timeout <= 0 {
			return Config{}, fmt.Errorf("bootstrap: environment: %s=%q is not a positive duration", envTimeout, v)
		}
	}
	if err := cfg.validate(); err != nil {
		return Config{}, fmt.Errorf("%w (from the environment)", err)
	}
	return cfg, nil
}

// defaultListenAddr is where Listen binds without WithListenAddr: MKERNEL_BOOTSTRAP_ADDR,
// else MASTER_ADDR's interface with a free port, else loopback.
func defaultListenAddr() string {
	if v := strings.TrimSpace(os.Getenv(envAddr)); v != "" {
		return v
	}
	if h := strings.TrimSpace(os.Getenv(envMaster)); h != "" {
		return net.JoinHostPort(h, "0")
	}
	return "127.0.0.1:0"
}
