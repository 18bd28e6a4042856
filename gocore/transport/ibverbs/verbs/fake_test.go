package verbs_test

import (
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs"
	"github.com/mkernel/mkernel/gocore/transport/ibverbs/verbs/verbstest"
)

// These tests drive the binding against the fake provider (see verbstest):
// the same dlopen, struct layouts and provider ops as with a real device,
// with an emulated fabric underneath.

// fakeLib loads a fresh fake provider as libibverbs and as libefa (one
// library plays both, as one fabric).
func fakeLib(t *testing.T, devices string) *verbs.Library {
	t.Helper()
	t.Setenv("FAKEVERBS_DEVICES", devices)
	path := verbstest.Build(t)
	lib, err := verbs.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := lib.LoadEFA(path); err != nil {
		t.Fatal(err)
	}
	return lib
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// hostMem maps n bytes outside the Go heap.
func hostMem(t *testing.T, n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Munmap(b) })
	return b
}

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(&b[0]))) }

func TestFakeDeviceQueries(t *testing.T) {
	for _, compat := range []string{"0", "1"} {
		t.Run("compat="+compat, func(t *testing.T) {
			t.Setenv("FAKEVERBS_COMPAT_CONTEXT", compat)
			lib := fakeLib(t, "mlx5_0:roce,mlx5_1:ib")
			devs := must[[]verbs.DeviceInfo](t)(lib.Devices())
			if len(devs) != 2 || devs[0].Name != "mlx5_0" || devs[1].Name != "mlx5_1" {
				t.Fatalf("devices %+v", devs)
			}
			if _, err := lib.Open("mlx5_9"); !errors.Is(err, verbs.ErrNotSupported) {
				t.Errorf("open of a missing device: %v", err)
			}
			ctx := must[*verbs.Context](t)(lib.Open("mlx5_0"))
			defer ctx.Close()
			pa := must[verbs.PortAttr](t)(ctx.QueryPort(1))
			if pa.State != verbs.PortActive || pa.LinkLayer != verbs.LinkLayerEthernet || pa.ActiveMTU.Bytes() != 1024 || pa.MaxMsgSize != 1<<30 {
				t.Errorf("port %+v", pa)
			}
			da := must[verbs.DeviceAttr](t)(ctx.QueryDevice())
			if da.MaxQPWR != 4096 || da.FirmwareVersion != "fake-1.0" || da.PhysicalPortCount != 1 {
				t.Errorf("device %+v", da)
			}
			table := must[[]verbs.GIDEntry](t)(ctx.GIDTable(1, ""))
			if len(table) != 4 || table[3].Type != verbs.GIDTypeRoCEv2 || !table[3].GID.IPv4Mapped() || table[3].NetDev == "" {
				t.Errorf("GID table %+v", table)
			}
			g := must[verbs.GID](t)(ctx.QueryGID(1, 3))
			if g != table[3].GID {
				t.Errorf("QueryGID(3) = %s, table has %s", g, table[3].GID)
			}
			ib := must[*verbs.Context](t)(lib.Open("mlx5_1"))
			defer ib.Close()
			if pa := must[verbs.PortAttr](t)(ib.QueryPort(1)); pa.LinkLayer != verbs.LinkLayerInfiniBand || pa.LID != 2 {
				t.Errorf("IB port %+v", pa)
			}
		})
	}
}

type rcPair struct {
	ctx  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	a, b *verbs.QP
	mem  []byte
	mr   *verbs.MR
}

// connect moves a and b through INIT, RTR, RTS to each other, as the spec
// requires for RC on RoCE.
func connectRC(t *testing.T, ctx *verbs.Context, a, b *verbs.QP) {
	t.Helper()
	table := must[[]verbs.GIDEntry](t)(ctx.GIDTable(1, ""))
	for _, x := range []struct{ q, peer *verbs.QP }{{a, b}, {b, a}} {
		if err := x.q.Modify(verbs.QPAttr{State: verbs.QPStateInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite},
			verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []struct{ q, peer *verbs.QP }{{a, b}, {b, a}} {
		ah := verbs.AHAttr{IsGlobal: true, DGID: table[3].GID, SGIDIndex: 3, HopLimit: 64, Port: 1}
		if err := x.q.Modify(verbs.QPAttr{State: verbs.QPStateRTR, AH: ah, PathMTU: 3, DestQPN: x.peer.Num(), RQPSN: 7, MaxDestRDAtomic: 1, MinRNRTimer: 12},
			verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRDAtomic|verbs.QPAttrMinRNRTimer); err != nil {
			t.Fatal(err)
		}
		if err := x.q.Modify(verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 7, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 1},
			verbs.QPAttrState|verbs.QPAttrSQPSN|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRDAtomic); err != nil {
			t.Fatal(err)
		}
	}
}

func newRCPair(t *testing.T, lib *verbs.Library) *rcPair {
	p := &rcPair{}
	p.ctx = must[*verbs.Context](t)(lib.Open("mlx5_0"))
	p.pd = must[*verbs.PD](t)(p.ctx.AllocPD())
	p.cq = must[*verbs.CQ](t)(p.ctx.CreateCQ(256))
	init := verbs.QPInit{Kind: verbs.QPKindRC, MaxSendWR: 64, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 8}
	p.a = must[*verbs.QP](t)(p.pd.CreateQP(init, p.cq, p.cq))
	p.b = must[*verbs.QP](t)(p.pd.CreateQP(init, p.cq, p.cq))
	p.mem = hostMem(t, 1<<16)
	p.mr = must[*verbs.MR](t)(p.pd.RegMR(uintptr(addr(p.mem)), uint64(len(p.mem)), verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
	connectRC(t, p.ctx, p.a, p.b)
	return p
}

func (p *rcPair) close(t *testing.T) {
	for _, c := range []interface{ Close() error }{p.a, p.b, p.mr, p.cq, p.pd, p.ctx} {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestFakeRCWriteSignalRecv(t *testing.T) {
	lib := fakeLib(t, "mlx5_0:roce")
	p := newRCPair(t, lib)
	defer p.close(t)
	src, dst := p.mem[:4096], p.mem[8192:]
	for i := range src {
		src[i] = byte(i * 7)
	}
	if n, err := p.b.PostRecv([]verbs.RecvWR{{WRID: 99}}); n != 1 || err != nil {
		t.Fatalf("PostRecv = %d, %v", n, err)
	}
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.OpRDMAWrite, LocalAddr: addr(src), Length: 4096, LKey: p.mr.LKey(), RemoteAddr: addr(dst), RKey: p.mr.RKey()},
		{WRID: 2, Opcode: verbs.OpRDMAWrite, Length: 8, Flags: verbs.SendSignaled | verbs.SendInline, InlineValue: 0x1122334455667788,
			RemoteAddr: addr(dst) + 8192, RKey: p.mr.RKey()},
		{WRID: 3, Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 0xdeadbeef, RemoteAddr: addr(dst), RKey: p.mr.RKey()},
	}
	if n, err := p.a.PostSend(wrs); n != 3 || err != nil {
		t.Fatalf("PostSend = %d, %v", n, err)
	}
	wcs := make([]verbs.WC, 8)
	n := must[int](t)(p.cq.Poll(wcs))
	if n != 3 {
		t.Fatalf("polled %d completions, want 3: %+v", n, wcs[:n])
	}
	if wcs[0].WRID != 2 || wcs[0].Status != verbs.WCSuccess || wcs[0].Opcode != verbs.WCRDMAWrite {
		t.Errorf("first completion %+v, want the signaled flag write (the data write is unsignaled)", wcs[0])
	}
	var recv *verbs.WC
	for i := range wcs[:n] {
		if wcs[i].Opcode.IsRecv() {
			recv = &wcs[i]
		}
	}
	if recv == nil || recv.WRID != 99 || !recv.HasImm() || recv.Imm != 0xdeadbeef || recv.Opcode != verbs.WCRecvRDMAWithImm || recv.QPNum != p.b.Num() {
		t.Errorf("receive completion %+v", recv)
	}
	for i := range 4096 {
		if dst[i] != src[i] {
			t.Fatalf("byte %d: %d, want %d", i, dst[i], src[i])
		}
	}
	if v := *(*uint64)(unsafe.Pointer(&dst[8192])); v != 0x1122334455667788 {
		t.Errorf("inline flag %#x", v)
	}

	// No allocation on the data path.
	one := []verbs.SendWR{{WRID: 5, Opcode: verbs.OpRDMAWrite, Length: 8, Flags: verbs.SendSignaled | verbs.SendInline, RemoteAddr: addr(dst), RKey: p.mr.RKey()}}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := p.a.PostSend(one); err != nil {
			t.Fatal(err)
		}
		if n, err := p.cq.Poll(wcs); n != 1 || err != nil {
			t.Fatalf("poll %d %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per post+poll", allocs)
	}
}

func TestFakeRCErrors(t *testing.T) {
	lib := fakeLib(t, "mlx5_0:roce")
	p := newRCPair(t, lib)
	defer p.close(t)
	// Closing what is still in use fails and can be retried later.
	if err := p.pd.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("closing a PD with MRs and QPs: %v, want EBUSY", err)
	}
	if err := p.cq.Close(); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("closing a CQ in use: %v, want EBUSY", err)
	}
	// A bad rkey: remote access error, then everything after it flushes.
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.OpRDMAWrite, Length: 8, Flags: verbs.SendSignaled | verbs.SendInline, RemoteAddr: addr(p.mem), RKey: 0x7777},
		{WRID: 2, Opcode: verbs.OpRDMAWrite, Length: 8, Flags: verbs.SendSignaled | verbs.SendInline, RemoteAddr: addr(p.mem), RKey: p.mr.RKey()},
	}
	if _, err := p.a.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 8)
	n := must[int](t)(p.cq.Poll(wcs))
	if n < 2 || wcs[0].Status != verbs.WCRemAccessErr || wcs[1].Status != verbs.WCWRFlushErr {
		t.Errorf("completions %+v, want remote access error then a flush", wcs[:n])
	}
	// Modify with a missing required attribute is refused.
	q := must[*verbs.QP](t)(p.pd.CreateQP(verbs.QPInit{Kind: verbs.QPKindRC, MaxSendWR: 4, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, p.cq, p.cq))
	if err := q.Modify(verbs.QPAttr{State: verbs.QPStateInit, Port: 1}, verbs.QPAttrState|verbs.QPAttrPort); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("INIT without pkey index and access flags: %v, want EINVAL", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := q.PostSend(wrs); !errors.Is(err, verbs.ErrClosed) {
		t.Errorf("PostSend after Close: %v", err)
	}
}

func TestFakeDMABuf(t *testing.T) {
	lib := fakeLib(t, "mlx5_0:roce")
	if !lib.Features().DMABuf {
		t.Fatal("the fake exports ibv_reg_dmabuf_mr")
	}
	ctx := must[*verbs.Context](t)(lib.Open("mlx5_0"))
	defer ctx.Close()
	pd := must[*verbs.PD](t)(ctx.AllocPD())
	defer pd.Close()
	mem := hostMem(t, 4096)
	fd, err := unix.MemfdCreate("dmabuf", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mr, err := pd.RegDMABufMR(0, 4096, addr(mem), fd, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := mr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegDMABufMR(0, 4096, addr(mem), 12345, verbs.AccessLocalWrite); !errors.Is(err, syscall.EBADF) {
		t.Errorf("a closed fd: %v, want EBADF", err)
	}
	t.Setenv("FAKEVERBS_DMABUF", "fail")
	if _, err := pd.RegDMABufMR(0, 4096, addr(mem), fd, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrNotSupported) {
		t.Errorf("a provider without DMA-BUF: %v, want ErrNotSupported", err)
	}
	// Relaxed ordering goes through ibv_reg_mr_iova2 (the fake's plain
	// ibv_reg_mr refuses optional flags, like the real macro's choice).
	ro, err := pd.RegMR(uintptr(addr(mem)), 4096, verbs.AccessLocalWrite|verbs.AccessRelaxedOrdering)
	if err != nil {
		t.Fatal(err)
	}
	_ = ro.Close()
}

func TestFakeSRD(t *testing.T) {
	lib := fakeLib(t, "rdmap0:efa")
	ctx := must[*verbs.Context](t)(lib.Open("rdmap0"))
	defer ctx.Close()
	ea := must[verbs.EFAAttr](t)(ctx.EFAQueryDevice())
	if ea.DeviceCaps&verbs.EFACapRDMAWrite == 0 || ea.MaxRDMASize != 1<<30 {
		t.Fatalf("efadv attributes %+v", ea)
	}
	pd := must[*verbs.PD](t)(ctx.AllocPD())
	defer pd.Close()
	cq := must[*verbs.CQ](t)(ctx.CreateCQ(64))
	defer cq.Close()
	init := verbs.QPInit{Kind: verbs.QPKindSRD, MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1,
		SendOps: verbs.QPExWithRDMAWrite | verbs.QPExWithRDMAWriteWithImm | verbs.QPExWithSend}
	a := must[*verbs.QP](t)(pd.CreateQP(init, cq, cq))
	defer a.Close()
	b := must[*verbs.QP](t)(pd.CreateQP(init, cq, cq))
	defer b.Close()
	for _, q := range []*verbs.QP{a, b} {
		for _, step := range []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPStateInit, Port: 1, QKey: 0x1234}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
			{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.QPAttrState},
			{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0, RNRRetry: 7}, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrRNRRetry},
		} {
			if err := q.Modify(step.a, step.m); err != nil {
				t.Fatal(err)
			}
		}
	}
	gid := must[verbs.GID](t)(ctx.QueryGID(1, 0))
	ah := must[*verbs.AH](t)(pd.CreateAH(verbs.AHAttr{IsGlobal: true, DGID: gid, Port: 1}))
	defer ah.Close()
	mem := hostMem(t, 8192)
	mr := must[*verbs.MR](t)(pd.RegMR(uintptr(addr(mem)), 8192, verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
	defer mr.Close()
	for i := range 1000 {
		mem[i] = byte(i)
	}
	if _, err := b.PostRecv([]verbs.RecvWR{{WRID: 7}}); err != nil {
		t.Fatal(err)
	}
	err := a.PostSendEx([]verbs.SendWR{{WRID: 1, Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: 42,
		LocalAddr: addr(mem), Length: 1000, LKey: mr.LKey(), RemoteAddr: addr(mem) + 4096, RKey: mr.RKey(),
		AH: ah.Handle(), RemoteQPN: b.Num(), RemoteQKey: 0x1234}})
	if err != nil {
		t.Fatal(err)
	}
	wcs := make([]verbs.WC, 4)
	got := 0
	for tries := 0; got < 2 && tries < 100; tries++ {
		got += must[int](t)(cq.Poll(wcs[got:]))
	}
	if got != 2 {
		t.Fatalf("%d completions: %+v", got, wcs[:got])
	}
	for i := range 1000 {
		if mem[4096+i] != byte(i) {
			t.Fatalf("byte %d not written", i)
		}
	}
	// A wrong qkey is dropped by the receiver: the sender sees a failure.
	if err := a.PostSendEx([]verbs.SendWR{{WRID: 2, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, AH: ah.Handle(), RemoteQPN: b.Num(), RemoteQKey: 1}}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for tries := 0; n == 0 && tries < 100; tries++ {
		n = must[int](t)(cq.Poll(wcs))
	}
	if n != 1 || wcs[0].Status == verbs.WCSuccess {
		t.Errorf("send with a wrong qkey: %+v", wcs[:n])
	}
	// An RC post on an SRD QP's extended API is refused before posting.
	if err := a.PostSendEx([]verbs.SendWR{{WRID: 3, Opcode: verbs.OpRDMARead, AH: ah.Handle()}}); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("unsupported opcode: %v", err)
	}
}
