package bootstrap

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestConfigFromEnv(t *testing.T) {
	const hexSecret = "000102030405060708090a0b0c0d0e0f"
	base := map[string]string{
		envRank:   "3",
		envWorld:  "8",
		envAddr:   "10.1.2.3:29511",
		envSecret: hexSecret,
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<unset>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	read := func(m map[string]string) (Config, error) {
		return configFromEnv(func(k string) (string, bool) { v, ok := m[k]; return v, ok })
	}

	cfg, err := read(with(envTimeout, "90s"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rank != 3 || cfg.World != 8 || cfg.RootAddr != "10.1.2.3:29511" || cfg.Timeout != 90*time.Second ||
		!bytes.Equal(cfg.Secret, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) {
		t.Errorf("config = %+v", cfg)
	}

	// torchrun's names are the fallback; ours win when both are set.
	cfg, err = read(with(envRank, "<unset>", envWorld, "<unset>", envTorchRank, "5", envTorchSize, "6"))
	if err != nil || cfg.Rank != 5 || cfg.World != 6 {
		t.Errorf("fallback: %+v, %v", cfg, err)
	}
	cfg, err = read(with(envTorchRank, "5", envTorchSize, "6"))
	if err != nil || cfg.Rank != 3 || cfg.World != 8 {
		t.Errorf("precedence: %+v, %v", cfg, err)
	}
	cfg, err = read(with(envWorld, "1", envRank, "0", envAddr, "<unset>"))
	if err != nil || cfg.World != 1 {
		t.Errorf("world of one needs no address: %+v, %v", cfg, err)
	}

	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no secret", with(envSecret, "<unset>"), "MKERNEL_JOB_SECRET is not set"},
		{"blank secret", with(envSecret, "  "), "MKERNEL_JOB_SECRET is not set"},
		{"short secret", with(envSecret, "0011223344"), "5 bytes"},
		{"long secret", with(envSecret, strings.Repeat("ab", SecretMaxLen+1)), "65 bytes"},
		{"secret not hex", with(envSecret, strings.Repeat("zz", 16)), "not hex"},
		{"no rank", with(envRank, "<unset>"), "MKERNEL_RANK or RANK is not set"},
		{"rank not a number", with(envRank, "three"), `MKERNEL_RANK="three" is not an integer`},
		{"no world", with(envWorld, "<unset>"), "MKERNEL_WORLD_SIZE or WORLD_SIZE is not set"},
		{"rank out of range", with(envRank, "8"), "rank 8 outside 0..7"},
		{"world too large", with(envWorld, "5000"), "world size 5000"},
		{"no address", with(envAddr, "<unset>"), "MKERNEL_BOOTSTRAP_ADDR is not set"},
		{"bad address", with(envAddr, "10.1.2.3"), "missing port"},
		{"bad timeout", with(envTimeout, "soon"), `MKERNEL_BOOTSTRAP_TIMEOUT="soon"`},
		{"negative timeout", with(envTimeout, "-1s"), "not a positive duration"},
	} {
		if _, err := read(tc.env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// ConfigFromEnv reads the real environment.
func TestConfigFromProcessEnv(t *testing.T) {
	t.Setenv(envRank, "1")
	t.Setenv(envWorld, "2")
	t.Setenv(envAddr, "127.0.0.1:4000")
	t.Setenv(envSecret, strings.Repeat("ab", 32))
	t.Setenv(envTimeout, "")
	cfg, err := ConfigFromEnv()
	if err != nil || cfg.Rank != 1 || cfg.World != 2 || len(cfg.Secret) != 32 || cfg.Timeout != 0 {
		t.Fatalf("%+v, %v", cfg, err)
	}
	t.Setenv(envSecret, "")
	if _, err := ConfigFromEnv(); err == nil {
		t.Fatal("missing secret accepted")
	}
}

func TestListenDefaultAddress(t *testing.T) {
	t.Setenv(envAddr, "")
	t.Setenv(envMaster, "")
	if got := defaultListenAddr(); got != "127.0.0.1:0" {
		t.Errorf("no env: %q", got)
	}
	t.Setenv(envMaster, "localhost")
	if got := defaultListenAddr(); got != "localhost:0" {
		t.Errorf("MASTER_ADDR: %q", got)
	}
	t.Setenv(envAddr, "127.0.0.1:0")
	r, err := Listen(t.Context(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !strings.HasPrefix(r.ID().Addr(), "127.0.0.1:") || strings.HasSuffix(r.ID().Addr(), ":0") {
		t.Errorf("listening on %q", r.ID().Addr())
	}
}
