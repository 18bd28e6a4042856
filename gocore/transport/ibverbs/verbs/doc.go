// Package verbs is the thin binding of libibverbs (and libefa's efadv
// calls) that the ibverbs and efa transport backends share. It is the only
// cgo in either backend; it is not meant for use elsewhere.
//
// # Loading
//
// Nothing links against rdma-core. Load dlopens libibverbs.so.1
// (RTLD_NOW|RTLD_LOCAL) and resolves every entry point it calls with dlvsym,
// by the symbol version the headers describe (IBVERBS_1.1, _1.8 for
// ibv_reg_mr_iova2, _1.11 for _ibv_query_gid_table, _1.12 for
// ibv_reg_dmabuf_mr; EFA_1.1 for efadv_query_device and efadv_create_qp_ex
// through LoadEFA). The optional ones may be missing (Features says which);
// a missing required one, a missing library, or a build without the headers
// gives an error matching ErrNotSupported (= transport.ErrNotSupported). A
// loaded library is never unloaded: provider code stays reachable through
// function pointers in every object it made.
//
// Half of the verbs API is not exported functions but static inline
// wrappers in verbs.h that call through the provider's function pointers —
// ibv_post_send, ibv_post_recv and ibv_poll_cq through ctx->ops, ibv_wr_*
// through struct ibv_qp_ex, ibv_query_port through the extended context's
// query_port op (falling back to the exported compat entry point) — and a
// few names are macros choosing an exported symbol at compile time
// (ibv_reg_mr picks ibv_reg_mr_iova2 when optional access flags such as
// relaxed ordering are set). The C shim (shim.c) never calls a verbs.h
// function or macro: it calls exported functions through the resolved
// pointers and re-implements the inline ones on the same struct fields.
// TestNoLinkTimeVerbsDependency checks that the test binary imports no ibv_
// or efadv_ symbol and no rdma-core library.
//
// # Building with and without rdma-core headers
//
// shim.c uses rdma-core's <infiniband/verbs.h> and <infiniband/efadv.h>
// (Debian: libibverbs-dev) for types, struct layouts and constants only. It
// checks for them with __has_include: without them it compiles to a stub
// whose every entry point reports ErrNotSupported, so the package — and
// everything importing it — builds and passes its tests anyway; Built says
// which. -tags mkernel_nordma forces the stub where the headers are
// installed (how CI proves the header-less build). One trap: Go's build
// cache keys cgo objects on the package's own files, not on system headers,
// so a stub built before libibverbs-dev was installed stays in the cache;
// run go clean -cache after installing the headers (the ErrNotSupported
// message says so). Without cgo
// (CGO_ENABLED=0) lib_nocgo.go provides the same API, all ErrNotSupported.
// Go sees only the shim's own types (shim.h); the work-request and
// completion structs it hands over by pointer (SendWR, RecvWR, WC) are
// checked at compile time to have the shim's layout, and the ABI constants
// the Go side uses are static-asserted against the headers.
//
// # Data path
//
// QP.PostSend, QP.PostSendEx, QP.PostRecv and CQ.Poll take caller-owned
// slices, convert in C on the C stack, call the provider, and allocate
// nothing (the cgo calls are declared noescape/nocallback). Objects have
// idempotent Close methods that put the handle back if the destroy call
// fails (a PD still in use: EBUSY), so Close can be retried in the right
// order.
//
// # What was run
//
// There is no RDMA device on any machine available to this project. The
// binding was run against the system libibverbs (loads; ibv_get_device_list
// fails with ENOSYS, read as ErrNotSupported) and against verbstest's fake
// provider, which exercises every entry point, both query_port paths,
// DMA-BUF registration, relaxed ordering through ibv_reg_mr_iova2, RC and
// SRD posting and polling, and error completions. Real providers (mlx5,
// efa) and real hardware were not available.
package verbs
