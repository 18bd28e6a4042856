// Package datapath assembles one rank's inter-node data path from the parts: symmetric
// shared-memory buffers and the arrival flag array, a transport chosen and connected over
// the bootstrap session, the command FIFO, and the proxy that drains it. It is what the C
// ABI, the Python bindings, the host reference backend and the benchmarks open; the
// parts stay usable on their own.
//
// Every rank calls Open with the same buffer ids (collective: it all-gathers over the
// session twice, to agree on a backend and to exchange connection blobs). Afterwards a
// producer — a host thread through fifo.h's mk_fifo_push or fifo.Ring.Push, later a GPU
// kernel — writes commands naming buffer ids and offsets into Ring(); the proxy moves the
// bytes; receivers wait on Flag(slot). Memory is memfd-backed (gocore/transport/shm), so
// the loopback backend and out-of-process plugins can map it; on a GPU machine the
// buffers become host-pinned by cudaHostRegister of the same mappings.
//
// A host producer (C++, through the C ABI's datapath_* entries and fifo.h):
//
//	mk_fifo_ctrl* f;  api->datapath_fifo(d, (void**)&f);
//	uint64_t* flags;  api->datapath_buffer(d, 0, (void**)&flags, &n);
//	void* buf;        api->datapath_buffer(d, 1, &buf, &n);        // symmetric buffer 1
//	// ... fill buf[off, off+len) ...
//	mk_fifo_cmd c = {0};
//	c.kind = MK_FIFO_WRITE_SIGNAL; c.peer = p; c.local_buf = 1; c.local_off = off;
//	c.remote_buf = 1; c.remote_off = dst_off; c.bytes = len;
//	c.arrival_slot = my_rank; c.arrival_seq = ++epoch; c.enqueue_ns = mk_fifo_now_ns();
//	mk_fifo_push(f, &c, timeout_ns, &ticket);          // MK_FIFO_FAILED: datapath_check says why
//	mk_fifo_flag_wait(&flags[src_rank], epoch, timeout_ns); // the peer's data is here
//	mk_fifo_wait_done(f, ticket, timeout_ns);          // before reusing buf[off, off+len)
package datapath
