package plugin_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mkernel/mkernel/gocore/transport"
	"github.com/mkernel/mkernel/gocore/transport/plugin"
	"github.com/mkernel/mkernel/gocore/transport/transporttest"
)

var pluginBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mkernel-plugin")
	if err != nil {
		panic(err)
	}
	pluginBin = filepath.Join(dir, "mkernel-net-tcp")
	build := exec.Command("go", "build", "-o", pluginBin, "./cmd/mkernel-net-tcp")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("build the tcp plugin: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func openPlugin(ctx context.Context, cfg transport.Config) (transport.Transport, error) {
	return plugin.Open(ctx, pluginBin, cfg)
}

// TestConformance runs the whole suite against the tcp backend served as a plugin.
func TestConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Suite{Open: openPlugin})
}

func TestSelectedByEnvironment(t *testing.T) {
	t.Setenv(transport.EnvNetPlugin, pluginBin)
	tr, err := transport.Open(context.Background(), nil, transport.Config{World: 1, Key: transporttest.TestKey})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if tr.Name() != "plugin:tcp" {
		t.Fatalf("MKERNEL_NET_PLUGIN opened %q", tr.Name())
	}
}

func TestNotAPlugin(t *testing.T) {
	_, err := plugin.Open(context.Background(), "/bin/true", transport.Config{World: 1, Key: transporttest.TestKey, Timeout: 3 * time.Second})
	if !errors.Is(err, transport.ErrNotSupported) {
		t.Fatalf("/bin/true as a plugin: %v", err)
	}
	// The plugin refuses a host speaking another protocol version: run it with a bad cookie.
	out, err := exec.Command(pluginBin).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "plugin") {
		t.Fatalf("the plugin binary run directly: %v\n%s", err, out)
	}
}

// TestPluginDies: killing the plugin process fails the host transport, naming it.
func TestPluginDies(t *testing.T) {
	j := transporttest.StartJob(t, openPlugin, transporttest.JobOptions{World: 2, DataSize: 1 << 16})
	tr := j.Ranks[0].T.(*plugin.Transport)
	if err := plugin.KillForTest(tr); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the host did not notice its plugin died")
	}
	if err := tr.Err(); !errors.Is(err, transport.ErrPeerGone) || !strings.Contains(err.Error(), "plugin") {
		t.Fatalf("error %v", err)
	}
}
