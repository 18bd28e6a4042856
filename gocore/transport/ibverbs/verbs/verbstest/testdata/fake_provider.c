// fake_provider.c: a stand-in for libibverbs.so.1 + libefa.so.1 that
// emulates RDMA devices and their fabric inside one process, for tests on
// machines without an RDMA NIC. It is compiled at test time against the real
// rdma-core headers (verbstest.Build) and loaded by path, so package verbs'
// dlopen, symbol lookup, struct layouts, the provider ops it calls through
// (ctx->ops.post_send/post_recv/poll_cq, the extended query_port op,
// ibv_qp_ex's wr_* functions) and the backends' protocols all run for real.
//
// What it models: devices from FAKEVERBS_DEVICES ("mlx5_0:roce,mlx5_1:ib,
// rdmap0:efa", default "mlx5_0:roce"); PDs with reference counts (closing a
// PD or CQ still in use fails with EBUSY, as in the kernel); MRs looked up by
// key with access and bounds checks; the QP state machine with the verbs
// spec's required attribute masks per transition (a missing or unexpected
// attribute is EINVAL); RC queue pairs that execute RDMA WRITE, WRITE with
// immediate and SEND in order, at post time or, while the peer is not ready
// (not RTR, gone) or has no receive posted, from later posts and polls until
// the retry budget (timeout, retry_cnt, rnr_retry) runs out, with
// send queue accounting (entries are freed when the completion that retires
// them is polled); RC errors (remote access error, retry exceeded when the
// peer QP is gone or not ready) that move the QP to ERR and flush; SRD queue
// pairs (efadv_create_qp_ex + ibv_qp_ex) whose work requests are delivered
// later, in random order, from inside poll_cq, with RNR (no receive posted)
// retried until a receive appears, and RDMA writes refused ("remote
// operation error") unless the receiver holds an address handle for the
// sender, as EFA requires.
//
// What it does not model: timing, PCIe ordering, relaxed ordering, real
// address translation (iova is the host address; a DMA-BUF fd is only
// checked to be open), multiple ports, LID/GID routing beyond checking that
// the address names the device the peer QP lives on.
//
// FAKEVERBS_COMPAT_CONTEXT=1 makes contexts non-extended, so
// ibv_query_port's compat entry point is used instead of the op;
// FAKEVERBS_DMABUF=fail makes ibv_reg_dmabuf_mr fail with EOPNOTSUPP;
// FAKEVERBS_NO_INLINE=1 refuses inline data; FAKEVERBS_EFA_CAPS sets the
// efadv device_caps (decimal or 0x hex); FAKEVERBS_PORT_STATE sets the
// port state (default 4, ACTIVE).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>
// efadv.h is not included: the efadv entry points below take our own
// structs, laid out as rdma-core 52's, and honour inlen like libefa does.

#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_get_device_list

#define API __attribute__((visibility("default")))

enum { KIND_ROCE, KIND_IB, KIND_EFA };
enum { MAX_DEVS = 8, GIDS = 4 };

struct fdev {
	struct ibv_device dev;
	int kind;
	int index;
	union ibv_gid gids[GIDS];
	uint32_t gid_types[GIDS];
	int ngids;
};

static pthread_mutex_t mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static struct fdev devs[MAX_DEVS];
static struct ibv_device *devlist[MAX_DEVS + 1];
static int ndevs = -1;

static int env_int(const char *name, int def) {
	const char *v = getenv(name);
	return v != NULL && *v ? (int)strtol(v, NULL, 0) : def;
}

static void init_devs(void) {
	if (ndevs >= 0) return;
	const char *spec = getenv("FAKEVERBS_DEVICES");
	char buf[512];
	snprintf(buf, sizeof buf, "%s", spec && *spec ? spec : "mlx5_0:roce");
	ndevs = 0;
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok && ndevs < MAX_DEVS; tok = strtok_r(NULL, ",", &save)) {
		struct fdev *d = &devs[ndevs];
		memset(d, 0, sizeof *d);
		char *colon = strchr(tok, ':');
		const char *kind = colon ? colon + 1 : "roce";
		if (colon) *colon = 0;
		snprintf(d->dev.name, sizeof d->dev.name, "%s", tok);
		snprintf(d->dev.dev_name, sizeof d->dev.dev_name, "uverbs%d", ndevs);
		d->kind = !strcmp(kind, "ib") ? KIND_IB : !strcmp(kind, "efa") ? KIND_EFA : KIND_ROCE;
		d->index = ndevs;
		d->dev.node_type = d->kind == KIND_EFA ? IBV_NODE_UNSPECIFIED : IBV_NODE_CA;
		d->dev.transport_type = d->kind == KIND_EFA ? IBV_TRANSPORT_UNSPECIFIED : IBV_TRANSPORT_IB;
		uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x00, 0x5e, 0xff, 0xfe, 0x00, 0x10, (uint8_t)ndevs};
		if (d->kind == KIND_ROCE) {
			// The kernel's layout: the link-local default GID as RoCE
			// v1 and v2, then the netdev's IPv4 address as v1 and v2.
			uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, (uint8_t)(1 + ndevs)};
			memcpy(d->gids[0].raw, ll, 16);
			memcpy(d->gids[1].raw, ll, 16);
			memcpy(d->gids[2].raw, v4, 16);
			memcpy(d->gids[3].raw, v4, 16);
			d->gid_types[0] = d->gid_types[2] = IBV_GID_TYPE_ROCE_V1;
			d->gid_types[1] = d->gid_types[3] = IBV_GID_TYPE_ROCE_V2;
			d->ngids = 4;
		} else {
			memcpy(d->gids[0].raw, ll, 16);
			d->gid_types[0] = IBV_GID_TYPE_IB;
			d->ngids = 1;
		}
		devlist[ndevs] = &d->dev;
		ndevs++;
	}
	devlist[ndevs] = NULL;
}

static struct fdev *fdev_of(struct ibv_context *c) { return (struct fdev *)c->device; }

// ---- objects -------------------------------------------------------------

struct fctx {
	struct verbs_context v; // ibv_context is its last member
};

struct fpd {
	struct ibv_pd pd;
	int refs;
};

struct fmr {
	struct ibv_mr mr;
	struct fmr *next;
	int access;
	uint64_t iova;
	int live;
};

struct fcqe {
	struct ibv_wc wc;
	struct fqp *qp; // the send queue this completion retires entries of
	int retire;
};

struct fcq {
	struct ibv_cq cq;
	struct fcqe *ring;
	int cap, head, count;
	int overrun;
	int refs;
};

struct fah {
	struct ibv_ah ah;
	struct ibv_ah_attr attr;
	struct fah *next;
};

struct frecv {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t len, lkey;
};

struct fqp {
	struct ibv_qp_ex x; // x.qp_base is the ibv_qp
	struct fqp *next;
	int srd;
	int live;
	uint32_t port, qkey, access, dest_qpn, path_mtu;
	struct ibv_ah_attr ah;
	struct ibv_qp_cap cap;
	int sq_used;    // send entries not yet retired by a polled completion
	int unsignaled; // posted unsignaled WRs since the last signaled one
	struct frecv *rq;
	int rq_head, rq_count;
	// RC: posted sends not yet executed (waiting for the peer), in order
	struct frc *sq_head, *sq_tail;
	uint8_t timeout, retry_cnt, rnr_retry;
	// SRD batch between wr_start and wr_complete
	struct fsrd *batch;
	int batch_err;
};

// An RC send work request waiting to execute.
struct frc {
	struct frc *next;
	struct ibv_send_wr wr; // next and sg_list not used
	uint32_t len;
	uint64_t laddr;
	uint8_t *inline_data;
	int64_t first_try; // ns; 0 before the first attempt
};

// An SRD work request on its way.
struct fsrd {
	struct fsrd *next;
	struct fqp *src;
	uint64_t wr_id;
	int opcode; // IBV_WR_*
	int signaled;
	uint32_t rkey, imm, has_imm;
	uint64_t raddr;
	struct fah *ah;
	uint32_t rqpn, rqkey;
	uint32_t lkey, len;
	uint64_t laddr;
	uint8_t *inline_data;
	int has_sge;
};

static struct fmr *mrs;
static struct fah *ahs;
static struct fqp *qps;
static struct fsrd *srd_pending;
static int srd_npending;
static uint32_t next_key = 0x1000, next_qpn = 0x100;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void) {
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static struct fqp *qp_by_num(uint32_t qpn) {
	for (struct fqp *q = qps; q; q = q->next)
		if (q->live && q->x.qp_base.qp_num == qpn) return q;
	return NULL;
}

static struct fmr *mr_by_key(uint32_t key) {
	for (struct fmr *m = mrs; m; m = m->next)
		if (m->live && m->mr.lkey == key) return m;
	return NULL;
}

// ---- devices ---------------------------------------------------------------

API struct ibv_device **ibv_get_device_list(int *num) {
	pthread_mutex_lock(&mu);
	init_devs();
	struct ibv_device **l = calloc((size_t)ndevs + 1, sizeof *l);
	if (l) memcpy(l, devlist, sizeof *l * ((size_t)ndevs + 1));
	if (num) *num = ndevs;
	pthread_mutex_unlock(&mu);
	return l;
}

API void ibv_free_device_list(struct ibv_device **l) { free(l); }

API const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

API __be64 ibv_get_device_guid(struct ibv_device *d) {
	return htobe64(0x0002c90300001000ULL + (uint64_t)((struct fdev *)d)->index);
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int fake_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len);

API struct ibv_context *ibv_open_device(struct ibv_device *d) {
	struct fctx *f = calloc(1, sizeof *f);
	if (!f) {
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_context *c = &f->v.context;
	c->device = d;
	c->ops.post_send = fake_post_send;
	c->ops.post_recv = fake_post_recv;
	c->ops.poll_cq = fake_poll_cq;
	c->cmd_fd = -1;
	c->async_fd = -1;
	if (!env_int("FAKEVERBS_COMPAT_CONTEXT", 0)) {
		c->abi_compat = __VERBS_ABI_IS_EXTENDED;
		f->v.sz = sizeof f->v;
		f->v.query_port = fake_query_port_ex;
	}
	return c;
}

API int ibv_close_device(struct ibv_context *c) {
	free((struct fctx *)((uint8_t *)c - offsetof(struct fctx, v.context)));
	return 0;
}

API int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
	memset(a, 0, sizeof *a);
	snprintf(a->fw_ver, sizeof a->fw_ver, "fake-1.0");
	a->node_guid = ibv_get_device_guid(c->device);
	a->vendor_id = fdev_of(c)->kind == KIND_EFA ? 0x1d0f : 0x02c9;
	a->vendor_part_id = fdev_of(c)->kind == KIND_EFA ? 0xefa1 : 4129;
	a->max_mr_size = 1ULL << 40;
	a->max_qp = 1 << 16;
	a->max_qp_wr = env_int("FAKEVERBS_MAX_QP_WR", 4096);
	a->max_sge = 4;
	a->max_cq = 1 << 16;
	a->max_cqe = env_int("FAKEVERBS_MAX_CQE", 1 << 16);
	a->max_mr = 1 << 20;
	a->max_pd = 1 << 16;
	a->max_ah = 1 << 16;
	a->max_qp_rd_atom = 16;
	a->max_qp_init_rd_atom = 16;
	a->phys_port_cnt = 1;
	return 0;
}

static void fill_port(struct ibv_context *c, struct ibv_port_attr *a) {
	struct fdev *d = fdev_of(c);
	a->state = (enum ibv_port_state)env_int("FAKEVERBS_PORT_STATE", IBV_PORT_ACTIVE);
	a->max_mtu = IBV_MTU_4096;
	a->active_mtu = d->kind == KIND_ROCE ? IBV_MTU_1024 : IBV_MTU_4096;
	a->gid_tbl_len = GIDS;
	a->max_msg_sz = 1u << 30;
	a->pkey_tbl_len = 1;
	a->lid = d->kind == KIND_IB ? (uint16_t)(1 + d->index) : 0;
	a->link_layer = d->kind == KIND_ROCE  ? IBV_LINK_LAYER_ETHERNET
	                : d->kind == KIND_IB ? IBV_LINK_LAYER_INFINIBAND
	                                     : IBV_LINK_LAYER_UNSPECIFIED;
	a->phys_state = 5;
}

static int fake_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len) {
	if (port != 1 || len < sizeof *a) return EINVAL;
	memset(a, 0, sizeof *a);
	fill_port(c, a);
	return 0;
}

// The compat entry point fills only the fields older ABIs had, up to
// link_layer; callers reach it only with non-extended contexts.
API int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *out) {
	if (port != 1) return EINVAL;
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	fill_port(c, &a);
	memcpy(out, &a, offsetof(struct ibv_port_attr, flags));
	return 0;
}

API int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *gid) {
	struct fdev *d = fdev_of(c);
	if (port != 1 || index < 0 || index >= GIDS) {
		errno = EINVAL;
		return -1;
	}
	memset(gid, 0, sizeof *gid);
	if (index < d->ngids) *gid = d->gids[index];
	return 0;
}

API ssize_t _ibv_query_gid_table(struct ibv_context *c, struct ibv_gid_entry *e, size_t max, uint32_t flags,
                                 size_t entry_size) {
	struct fdev *d = fdev_of(c);
	if (flags != 0 || entry_size != sizeof *e) return -EINVAL;
	if (max < (size_t)d->ngids) return -EINVAL;
	for (int i = 0; i < d->ngids; i++) {
		memset(&e[i], 0, sizeof e[i]);
		e[i].gid = d->gids[i];
		e[i].gid_index = (uint32_t)i;
		e[i].port_num = 1;
		e[i].gid_type = d->gid_types[i];
		e[i].ndev_ifindex = d->kind == KIND_ROCE ? 1 : 0; // "lo" on Linux
	}
	return d->ngids;
}

// ---- PD, MR ----------------------------------------------------------------

API struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
	struct fpd *p = calloc(1, sizeof *p);
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	p->pd.context = c;
	return &p->pd;
}

API int ibv_dealloc_pd(struct ibv_pd *pd) {
	pthread_mutex_lock(&mu);
	struct fpd *p = (struct fpd *)pd;
	int refs = p->refs;
	pthread_mutex_unlock(&mu);
	if (refs != 0) return EBUSY;
	free(p);
	return 0;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access) {
	if (len == 0 || (access & IBV_ACCESS_REMOTE_WRITE && !(access & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL;
		return NULL;
	}
	struct fmr *m = calloc(1, sizeof *m);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&mu);
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = len;
	m->mr.lkey = m->mr.rkey = next_key++;
	m->access = access;
	m->iova = iova;
	m->live = 1;
	m->next = mrs;
	mrs = m;
	((struct fpd *)pd)->refs++;
	pthread_mutex_unlock(&mu);
	return &m->mr;
}

API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	if (access & IBV_ACCESS_OPTIONAL_RANGE) {
		errno = EINVAL; // the real library takes these only through iova2
		return NULL;
	}
	return reg(pd, addr, len, (uint64_t)(uintptr_t)addr, access);
}

API struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned int access) {
	return reg(pd, addr, len, iova, (int)(access & ~IBV_ACCESS_OPTIONAL_RANGE));
}

API struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t len, uint64_t iova, int fd, int access) {
	const char *mode = getenv("FAKEVERBS_DMABUF");
	if (mode && !strcmp(mode, "fail")) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (fcntl(fd, F_GETFD) < 0) {
		errno = EBADF;
		return NULL;
	}
	(void)offset;
	// No real DMA-BUF import: the fake takes iova to be this process's
	// address of the memory (tests pass host memory and a memfd).
	return reg(pd, (void *)(uintptr_t)iova, len, iova, access);
}

API int ibv_dereg_mr(struct ibv_mr *mr) {
	pthread_mutex_lock(&mu);
	struct fmr *m = (struct fmr *)mr;
	m->live = 0;
	((struct fpd *)mr->pd)->refs--;
	for (struct fmr **pp = &mrs; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	pthread_mutex_unlock(&mu);
	free(m);
	return 0;
}

// ---- CQ ---------------------------------------------------------------------

API struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context, struct ibv_comp_channel *ch,
                                 int vec) {
	(void)ch, (void)vec;
	if (cqe < 1 || cqe > (1 << 20)) {
		errno = EINVAL;
		return NULL;
	}
	struct fcq *q = calloc(1, sizeof *q);
	if (!q || !(q->ring = calloc((size_t)cqe, sizeof *q->ring))) {
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	q->cq.context = c;
	q->cq.cq_context = cq_context;
	q->cq.cqe = cqe;
	q->cap = cqe;
	return &q->cq;
}

API int ibv_destroy_cq(struct ibv_cq *cq) {
	pthread_mutex_lock(&mu);
	struct fcq *q = (struct fcq *)cq;
	int refs = q->refs;
	pthread_mutex_unlock(&mu);
	if (refs) return EBUSY;
	free(q->ring);
	free(q);
	return 0;
}

// push adds a completion; mu is held.
static void push(struct ibv_cq *cq, const struct ibv_wc *wc, struct fqp *retire_qp, int retire) {
	struct fcq *q = (struct fcq *)cq;
	if (q->count == q->cap) {
		q->overrun = 1;
		return;
	}
	struct fcqe *e = &q->ring[(q->head + q->count) % q->cap];
	e->wc = *wc;
	e->qp = retire_qp;
	e->retire = retire;
	q->count++;
}

static void srd_progress(int budget);
static void rc_progress(struct fqp *q);

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
	pthread_mutex_lock(&mu);
	srd_progress(8);
	for (struct fqp *q = qps; q; q = q->next)
		if (q->sq_head) rc_progress(q);
	struct fcq *q = (struct fcq *)cq;
	if (q->overrun) {
		pthread_mutex_unlock(&mu);
		return -EOVERFLOW;
	}
	int k = 0;
	while (k < n && q->count > 0) {
		struct fcqe *e = &q->ring[q->head];
		wc[k++] = e->wc;
		if (e->qp && e->qp->live) e->qp->sq_used -= e->retire;
		q->head = (q->head + 1) % q->cap;
		q->count--;
	}
	pthread_mutex_unlock(&mu);
	return k;
}

// ---- QP ---------------------------------------------------------------------

static void srd_wr_start(struct ibv_qp_ex *x);
static int srd_wr_complete(struct ibv_qp_ex *x);
static void srd_wr_abort(struct ibv_qp_ex *x);
static void srd_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr);
static void srd_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, __be32 imm);
static void srd_send(struct ibv_qp_ex *x);
static void srd_send_imm(struct ibv_qp_ex *x, __be32 imm);
static void srd_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey);
static void srd_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t len);
static void srd_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg);
static void srd_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t len);

static struct fqp *new_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq, struct ibv_qp_cap *cap,
                          enum ibv_qp_type type, int srd) {
	if (!scq || !rcq || cap->max_send_wr < 1 || cap->max_send_wr > 8192 || cap->max_recv_wr > 8192 ||
	    cap->max_send_sge > 4 || cap->max_recv_sge > 4 || cap->max_inline_data > 256) {
		errno = EINVAL;
		return NULL;
	}
	if (cap->max_inline_data > 0 && env_int("FAKEVERBS_NO_INLINE", 0)) {
		errno = EINVAL;
		return NULL;
	}
	struct fqp *q = calloc(1, sizeof *q);
	if (!q || !(q->rq = calloc(cap->max_recv_wr + 1, sizeof *q->rq))) {
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&mu);
	struct ibv_qp *b = &q->x.qp_base;
	b->context = pd->context;
	b->pd = pd;
	b->send_cq = scq;
	b->recv_cq = rcq;
	b->qp_num = next_qpn++;
	b->state = IBV_QPS_RESET;
	b->qp_type = type;
	q->srd = srd;
	q->cap = *cap;
	q->live = 1;
	q->next = qps;
	qps = q;
	((struct fpd *)pd)->refs++;
	((struct fcq *)scq)->refs++;
	((struct fcq *)rcq)->refs++;
	if (srd) {
		q->x.wr_start = srd_wr_start;
		q->x.wr_complete = srd_wr_complete;
		q->x.wr_abort = srd_wr_abort;
		q->x.wr_rdma_write = srd_rdma_write;
		q->x.wr_rdma_write_imm = srd_rdma_write_imm;
		q->x.wr_send = srd_send;
		q->x.wr_send_imm = srd_send_imm;
		q->x.wr_set_ud_addr = srd_set_ud_addr;
		q->x.wr_set_sge = srd_set_sge;
		q->x.wr_set_sge_list = srd_set_sge_list;
		q->x.wr_set_inline_data = srd_set_inline_data;
	}
	pthread_mutex_unlock(&mu);
	return q;
}

API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
	if (a->qp_type != IBV_QPT_RC || a->srq || a->sq_sig_all) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct fqp *q = new_qp(pd, a->send_cq, a->recv_cq, &a->cap, IBV_QPT_RC, 0);
	return q ? &q->x.qp_base : NULL;
}

API struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp) {
	struct fqp *q = (struct fqp *)qp;
	if (!q->srd) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return &q->x;
}

// The RC and SRD (UD-like) attribute tables of the verbs spec (IB spec
// 11.2.4.2), as masks of required and allowed optional attributes.
struct transition {
	int from, to;
	int rc_req, rc_opt, ud_req, ud_opt;
};

static const struct transition transitions[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0,
     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0},
    {IBV_QPS_INIT, IBV_QPS_RTR,
     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER,
     IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX, IBV_QP_STATE, IBV_QP_PKEY_INDEX | IBV_QP_QKEY},
    {IBV_QPS_RTR, IBV_QPS_RTS,
     IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
     IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE,
     IBV_QP_STATE | IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY | IBV_QP_RNR_RETRY},
};

static void flush_qp(struct fqp *q);
static void rc_pop(struct fqp *q);

API int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
	pthread_mutex_lock(&mu);
	struct fqp *q = (struct fqp *)qp;
	int rc = 0;
	if (!(mask & IBV_QP_STATE)) {
		rc = EINVAL;
		goto out;
	}
	if (a->qp_state == IBV_QPS_ERR) {
		if (mask != IBV_QP_STATE) rc = EINVAL;
		else {
			qp->state = IBV_QPS_ERR;
			flush_qp(q);
		}
		goto out;
	}
	rc = EINVAL;
	for (size_t i = 0; i < sizeof transitions / sizeof transitions[0]; i++) {
		const struct transition *t = &transitions[i];
		if (t->from != (int)qp->state || t->to != (int)a->qp_state) continue;
		int req = q->srd ? t->ud_req : t->rc_req, opt = q->srd ? t->ud_opt : t->rc_opt;
		if ((mask & req) != req || (mask & ~(req | opt)) != 0) break;
		struct ibv_port_attr pa;
		fill_port(qp->context, &pa);
		struct fdev *d = fdev_of(qp->context);
		if (mask & IBV_QP_PORT && a->port_num != 1) break;
		if (mask & IBV_QP_PKEY_INDEX && a->pkey_index != 0) break;
		if (mask & IBV_QP_PATH_MTU && (a->path_mtu < IBV_MTU_256 || a->path_mtu > pa.active_mtu)) break;
		if (mask & IBV_QP_TIMEOUT && a->timeout > 31) break;
		if (mask & IBV_QP_RETRY_CNT && a->retry_cnt > 7) break;
		if (mask & IBV_QP_RNR_RETRY && a->rnr_retry > 7) break;
		if (mask & (IBV_QP_RQ_PSN | IBV_QP_SQ_PSN) && (a->rq_psn > 0xffffff || a->sq_psn > 0xffffff)) break;
		if (mask & IBV_QP_AV) {
			struct ibv_ah_attr *ah = &a->ah_attr;
			if (ah->port_num != 1) break;
			if (d->kind == KIND_ROCE) {
				// RoCE needs a GRH from a valid local GID.
				if (!ah->is_global || ah->grh.sgid_index >= d->ngids || ah->grh.hop_limit == 0) break;
				union ibv_gid zero = {0};
				if (!memcmp(ah->grh.dgid.raw, zero.raw, 16)) break;
			} else if (d->kind == KIND_IB && ah->dlid == 0) {
				break;
			}
			q->ah = *ah;
		}
		if (mask & IBV_QP_PORT) q->port = a->port_num;
		if (mask & IBV_QP_QKEY) q->qkey = a->qkey;
		if (mask & IBV_QP_ACCESS_FLAGS) q->access = a->qp_access_flags;
		if (mask & IBV_QP_DEST_QPN) q->dest_qpn = a->dest_qp_num;
		if (mask & IBV_QP_PATH_MTU) q->path_mtu = a->path_mtu;
		if (mask & IBV_QP_TIMEOUT) q->timeout = a->timeout;
		if (mask & IBV_QP_RETRY_CNT) q->retry_cnt = a->retry_cnt;
		if (mask & IBV_QP_RNR_RETRY) q->rnr_retry = a->rnr_retry;
		qp->state = a->qp_state;
		rc = 0;
		break;
	}
out:
	pthread_mutex_unlock(&mu);
	return rc;
}

static void release_qp_refs(struct fqp *q) {
	struct ibv_qp *b = &q->x.qp_base;
	((struct fpd *)b->pd)->refs--;
	((struct fcq *)b->send_cq)->refs--;
	((struct fcq *)b->recv_cq)->refs--;
}

API int ibv_destroy_qp(struct ibv_qp *qp) {
	pthread_mutex_lock(&mu);
	struct fqp *q = (struct fqp *)qp;
	q->live = 0;
	release_qp_refs(q);
	// Drop its SRD work in flight and forget completions that would
	// retire its entries.
	for (struct fsrd **pp = &srd_pending; *pp;) {
		if ((*pp)->src == q) {
			struct fsrd *s = *pp;
			*pp = s->next;
			free(s->inline_data);
			free(s);
			srd_npending--;
		} else
			pp = &(*pp)->next;
	}
	for (struct fqp **pp = &qps; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			break;
		}
	for (int c = 0; c < 2; c++) {
		struct fcq *cq = (struct fcq *)(c ? qp->recv_cq : qp->send_cq);
		for (int i = 0; i < cq->count; i++) {
			struct fcqe *e = &cq->ring[(cq->head + i) % cq->cap];
			if (e->qp == q) e->qp = NULL;
		}
	}
	while (q->sq_head) rc_pop(q);
	pthread_mutex_unlock(&mu);
	free(q->batch);
	free(q->rq);
	free(q);
	return 0;
}

// ---- AH ---------------------------------------------------------------------

API struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a) {
	if (a->port_num != 1) {
		errno = EINVAL;
		return NULL;
	}
	struct fah *h = calloc(1, sizeof *h);
	if (!h) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&mu);
	h->ah.context = pd->context;
	h->ah.pd = pd;
	h->attr = *a;
	h->next = ahs;
	ahs = h;
	((struct fpd *)pd)->refs++;
	pthread_mutex_unlock(&mu);
	return &h->ah;
}

API int ibv_destroy_ah(struct ibv_ah *ah) {
	pthread_mutex_lock(&mu);
	((struct fpd *)ah->pd)->refs--;
	for (struct fah **pp = &ahs; *pp; pp = &(*pp)->next)
		if (*pp == (struct fah *)ah) {
			*pp = (*pp)->next;
			break;
		}
	pthread_mutex_unlock(&mu);
	free(ah);
	return 0;
}

// ---- the fabric ---------------------------------------------------------------

static void complete_send(struct fqp *q, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t len,
                          int signaled) {
	struct ibv_qp *b = &q->x.qp_base;
	if (!signaled && st == IBV_WC_SUCCESS) {
		q->unsignaled++;
		return;
	}
	struct ibv_wc wc;
	memset(&wc, 0, sizeof wc);
	wc.wr_id = wr_id;
	wc.status = st;
	wc.opcode = op;
	wc.byte_len = len;
	wc.qp_num = b->qp_num;
	wc.vendor_err = st == IBV_WC_SUCCESS ? 0 : 0x80 + st;
	push(b->send_cq, &wc, q, 1 + q->unsignaled);
	q->unsignaled = 0;
}

// take_recv consumes the oldest receive WR of q; -1 if none.
static int take_recv(struct fqp *q, struct frecv *out) {
	if (q->rq_count == 0) return -1;
	*out = q->rq[q->rq_head];
	q->rq_head = (q->rq_head + 1) % (int)(q->cap.max_recv_wr + 1);
	q->rq_count--;
	return 0;
}

static void complete_recv(struct fqp *dst, struct frecv *r, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t len,
                          int has_imm, uint32_t imm, uint32_t src_qpn) {
	struct ibv_wc wc;
	memset(&wc, 0, sizeof wc);
	wc.wr_id = r->wr_id;
	wc.status = st;
	wc.opcode = op;
	wc.byte_len = len;
	wc.qp_num = dst->x.qp_base.qp_num;
	wc.src_qp = src_qpn;
	if (has_imm) {
		wc.wc_flags = IBV_WC_WITH_IMM;
		wc.imm_data = imm; // already big-endian
	}
	push(dst->x.qp_base.recv_cq, &wc, NULL, 0);
}

// The flushes an error state implies: every posted receive completes with
// IBV_WC_WR_FLUSH_ERR. (RC sends execute at post time, so none wait.)
static void flush_qp(struct fqp *q) {
	struct frecv r;
	while (take_recv(q, &r) == 0) complete_recv(q, &r, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0, 0);
	rc_progress(q); // waiting sends flush in order
}

// local_ok checks that [addr, +len) is inside an MR of q's PD under lkey.
static int local_ok(struct fqp *q, uint32_t lkey, uint64_t addr, uint32_t len) {
	struct fmr *m = mr_by_key(lkey);
	return m && m->mr.pd == q->x.qp_base.pd && addr >= m->iova && addr + len <= m->iova + m->mr.length;
}

// remote_ptr returns where [raddr, +len) under rkey lands in dst, or NULL.
static uint8_t *remote_ptr(struct fqp *dst, uint32_t rkey, uint64_t raddr, uint32_t len) {
	struct fmr *m = mr_by_key(rkey);
	if (!m || m->mr.pd != dst->x.qp_base.pd || !(m->access & IBV_ACCESS_REMOTE_WRITE)) return NULL;
	if (raddr < m->iova || raddr + len > m->iova + m->mr.length || raddr + len < raddr) return NULL;
	return (uint8_t *)m->mr.addr + (raddr - m->iova);
}

// place copies len bytes, the last aligned 8-byte word with a release
// store so that a reader that acquires it sees the rest (a NIC writes in
// order over PCIe; this is the CPU-model equivalent).
static void place(uint8_t *dst, const uint8_t *src, uint32_t len) {
	if (len == 8 && ((uintptr_t)dst & 7) == 0) {
		uint64_t v;
		memcpy(&v, src, 8);
		__atomic_store_n((uint64_t *)dst, v, __ATOMIC_RELEASE);
		return;
	}
	memcpy(dst, src, len);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
	pthread_mutex_lock(&mu);
	struct fqp *q = (struct fqp *)qp;
	int rc = 0;
	for (; wr; wr = wr->next) {
		if (qp->state == IBV_QPS_RESET || wr->num_sge > (int)q->cap.max_recv_sge ||
		    q->rq_count >= (int)q->cap.max_recv_wr) {
			rc = qp->state == IBV_QPS_RESET || wr->num_sge > (int)q->cap.max_recv_sge ? EINVAL : ENOMEM;
			break;
		}
		struct frecv r = {.wr_id = wr->wr_id};
		if (wr->num_sge == 1) {
			r.addr = wr->sg_list[0].addr;
			r.len = wr->sg_list[0].length;
			r.lkey = wr->sg_list[0].lkey;
		}
		q->rq[(q->rq_head + q->rq_count) % (int)(q->cap.max_recv_wr + 1)] = r;
		q->rq_count++;
		if (qp->state == IBV_QPS_ERR) flush_qp(q);
	}
	if (rc && bad) *bad = wr;
	pthread_mutex_unlock(&mu);
	return rc;
}

enum { WAIT_ACK = -1, WAIT_RNR = -2 };

// rc_execute carries out one RC work request from q; returns the status of
// its send completion, or WAIT_ACK/WAIT_RNR when it must be retried.
static int rc_execute(struct fqp *q, struct ibv_send_wr *wr, uint32_t len, const uint8_t *src) {
	struct fqp *dst = qp_by_num(q->dest_qpn);
	// A peer that is gone, not yet ready, or connected elsewhere never
	// ACKs: the requester retries until its retry count is exhausted.
	if (!dst || (dst->x.qp_base.state != IBV_QPS_RTR && dst->x.qp_base.state != IBV_QPS_RTS) ||
	    dst->dest_qpn != q->x.qp_base.qp_num || dst->srd)
		return WAIT_ACK;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: {
		uint8_t *to = remote_ptr(dst, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, len);
		if (!to || !(dst->access & IBV_ACCESS_REMOTE_WRITE)) {
			dst->x.qp_base.state = IBV_QPS_ERR;
			flush_qp(dst);
			return IBV_WC_REM_ACCESS_ERR;
		}
		struct frecv r;
		if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && take_recv(dst, &r) != 0) return WAIT_RNR;
		place(to, src, len);
		if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
			complete_recv(dst, &r, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, len, 1, wr->imm_data, q->x.qp_base.qp_num);
		return IBV_WC_SUCCESS;
	}
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM: {
		struct frecv r;
		if (take_recv(dst, &r) != 0) return WAIT_RNR;
		if (len > r.len || (len > 0 && !local_ok(dst, r.lkey, r.addr, len))) {
			complete_recv(dst, &r, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, len, 0, 0, q->x.qp_base.qp_num);
			dst->x.qp_base.state = IBV_QPS_ERR;
			flush_qp(dst);
			return IBV_WC_REM_INV_REQ_ERR;
		}
		if (len) place((uint8_t *)(uintptr_t)r.addr, src, len);
		complete_recv(dst, &r, IBV_WC_SUCCESS, IBV_WC_RECV, len, wr->opcode == IBV_WR_SEND_WITH_IMM, wr->imm_data,
		              q->x.qp_base.qp_num);
		return IBV_WC_SUCCESS;
	}
	default:
		return IBV_WC_LOC_QP_OP_ERR;
	}
}

static int64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static enum ibv_wc_opcode wc_opcode(int wr_opcode) {
	return wr_opcode == IBV_WR_SEND || wr_opcode == IBV_WR_SEND_WITH_IMM ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
}

static void rc_pop(struct fqp *q) {
	struct frc *s = q->sq_head;
	q->sq_head = s->next;
	if (!q->sq_head) q->sq_tail = NULL;
	free(s->inline_data);
	free(s);
}

// rc_progress executes q's waiting sends in order, as far as the peer lets
// it; mu is held. A send to a peer that does not answer fails with "retry
// exceeded" after (retry_cnt + 1) ACK timeouts of 4.096 us << timeout, as on
// a real HCA; one that meets receiver-not-ready waits forever when rnr_retry
// is 7 (and as long as the ACK budget otherwise).
static void rc_progress(struct fqp *q) {
	while (q->sq_head) {
		struct frc *s = q->sq_head;
		int signaled = (s->wr.send_flags & IBV_SEND_SIGNALED) != 0;
		if (q->x.qp_base.state == IBV_QPS_ERR) {
			complete_send(q, s->wr.wr_id, IBV_WC_WR_FLUSH_ERR, wc_opcode(s->wr.opcode), 0, 1);
			rc_pop(q);
			continue;
		}
		const uint8_t *src = s->inline_data ? s->inline_data : (const uint8_t *)(uintptr_t)s->laddr;
		int st = rc_execute(q, &s->wr, s->len, src);
		if (st == WAIT_ACK || st == WAIT_RNR) {
			int64_t now = now_ns();
			if (s->first_try == 0) s->first_try = now;
			int64_t budget = (int64_t)(q->retry_cnt + 1) * (4096LL << q->timeout);
			if (st == WAIT_RNR && q->rnr_retry == 7) return;
			if (now - s->first_try <= budget) return;
			st = st == WAIT_ACK ? IBV_WC_RETRY_EXC_ERR : IBV_WC_RNR_RETRY_EXC_ERR;
		}
		complete_send(q, s->wr.wr_id, (enum ibv_wc_status)st, wc_opcode(s->wr.opcode), s->len, signaled);
		rc_pop(q);
		if (st != IBV_WC_SUCCESS) {
			q->x.qp_base.state = IBV_QPS_ERR;
			flush_qp(q);
		}
	}
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
	pthread_mutex_lock(&mu);
	struct fqp *q = (struct fqp *)qp;
	int rc = 0;
	for (; wr; wr = wr->next) {
		if (q->srd || (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) || wr->num_sge > (int)q->cap.max_send_sge) {
			rc = EINVAL;
			break;
		}
		if (q->sq_used >= (int)q->cap.max_send_wr) {
			rc = ENOMEM;
			break;
		}
		uint32_t len = wr->num_sge == 1 ? wr->sg_list[0].length : 0;
		int inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
		if (inl && len > q->cap.max_inline_data) {
			rc = EINVAL;
			break;
		}
		// The gather entry is checked when the WR is posted: a bad lkey
		// completes it in error once the WRs before it have executed.
		int bad_lkey = len && !inl && !local_ok(q, wr->sg_list[0].lkey, wr->sg_list[0].addr, len);
		struct frc *s = calloc(1, sizeof *s);
		if (!s || (inl && len && !(s->inline_data = malloc(len)))) {
			free(s);
			rc = ENOMEM;
			break;
		}
		q->sq_used++;
		s->wr = *wr;
		s->wr.next = NULL;
		s->wr.sg_list = NULL;
		s->len = len;
		if (len) {
			s->laddr = wr->sg_list[0].addr;
			if (inl) memcpy(s->inline_data, (void *)(uintptr_t)wr->sg_list[0].addr, len);
		}
		if (bad_lkey && qp->state != IBV_QPS_ERR) {
			rc_progress(q);
			if (qp->state != IBV_QPS_ERR && !q->sq_head) {
				complete_send(q, s->wr.wr_id, IBV_WC_LOC_PROT_ERR, wc_opcode(s->wr.opcode), 0, 1);
				free(s->inline_data);
				free(s);
				qp->state = IBV_QPS_ERR;
				flush_qp(q);
				continue;
			}
			// Earlier WRs still wait for the peer: the bad one waits too
			// and fails there (rare; good enough for a fake).
		}
		if (q->sq_tail) q->sq_tail->next = s;
		else q->sq_head = s;
		q->sq_tail = s;
	}
	rc_progress(q);
	if (rc && bad) *bad = wr;
	pthread_mutex_unlock(&mu);
	return rc;
}

// ---- SRD ----------------------------------------------------------------------

static struct fsrd *cur(struct ibv_qp_ex *x) { return ((struct fqp *)x)->batch; }

static void srd_wr_start(struct ibv_qp_ex *x) {
	struct fqp *q = (struct fqp *)x;
	q->batch_err = 0;
	free(q->batch); // an unfinished earlier batch
	q->batch = NULL;
}

// new_wr starts a work request in the batch (a singly linked list, newest
// first; wr_complete reverses it).
static struct fsrd *new_wr(struct ibv_qp_ex *x, int opcode) {
	struct fqp *q = (struct fqp *)x;
	struct fsrd *s = calloc(1, sizeof *s);
	if (!s) {
		q->batch_err = ENOMEM;
		return NULL;
	}
	s->src = q;
	s->wr_id = x->wr_id;
	s->signaled = (x->wr_flags & IBV_SEND_SIGNALED) != 0;
	s->opcode = opcode;
	s->next = q->batch;
	q->batch = s;
	return s;
}

static void srd_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr) {
	struct fsrd *s = new_wr(x, IBV_WR_RDMA_WRITE);
	if (s) s->rkey = rkey, s->raddr = raddr;
}
static void srd_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t raddr, __be32 imm) {
	struct fsrd *s = new_wr(x, IBV_WR_RDMA_WRITE_WITH_IMM);
	if (s) s->rkey = rkey, s->raddr = raddr, s->imm = imm, s->has_imm = 1;
}
static void srd_send(struct ibv_qp_ex *x) { new_wr(x, IBV_WR_SEND); }
static void srd_send_imm(struct ibv_qp_ex *x, __be32 imm) {
	struct fsrd *s = new_wr(x, IBV_WR_SEND_WITH_IMM);
	if (s) s->imm = imm, s->has_imm = 1;
}
static void srd_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey) {
	struct fsrd *s = cur(x);
	if (s) s->ah = (struct fah *)ah, s->rqpn = qpn, s->rqkey = qkey;
}
static void srd_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t len) {
	struct fsrd *s = cur(x);
	if (s) s->lkey = lkey, s->laddr = addr, s->len = len, s->has_sge = 1;
}
static void srd_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg) {
	if (n == 0) return;
	if (n > 1) {
		((struct fqp *)x)->batch_err = EINVAL;
		return;
	}
	srd_set_sge(x, sg[0].lkey, sg[0].addr, sg[0].length);
}
static void srd_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t len) {
	struct fsrd *s = cur(x);
	struct fqp *q = (struct fqp *)x;
	if (!s) return;
	if (len > q->cap.max_inline_data || !(s->inline_data = malloc(len ? len : 1))) {
		q->batch_err = EINVAL;
		return;
	}
	memcpy(s->inline_data, addr, len);
	s->len = (uint32_t)len;
}

static void srd_wr_abort(struct ibv_qp_ex *x) {
	struct fqp *q = (struct fqp *)x;
	while (q->batch) {
		struct fsrd *s = q->batch;
		q->batch = s->next;
		free(s->inline_data);
		free(s);
	}
}

static int srd_wr_complete(struct ibv_qp_ex *x) {
	pthread_mutex_lock(&mu);
	struct fqp *q = (struct fqp *)x;
	int n = 0;
	for (struct fsrd *s = q->batch; s; s = s->next) n++;
	int rc = q->batch_err;
	if (!rc && (x->qp_base.state != IBV_QPS_RTS || q->sq_used + n > (int)q->cap.max_send_wr)) rc =
		x->qp_base.state != IBV_QPS_RTS ? EINVAL : ENOMEM;
	for (struct fsrd *s = q->batch; s && !rc; s = s->next) {
		if (!s->ah || s->ah->ah.pd != x->qp_base.pd) rc = EINVAL;
		else if (s->has_sge && !local_ok(q, s->lkey, s->laddr, s->len)) rc = EINVAL;
	}
	if (rc) {
		pthread_mutex_unlock(&mu);
		srd_wr_abort(x);
		return rc;
	}
	// Hand the batch to the fabric in posting order; it leaves in any order.
	struct fsrd *rev = NULL;
	while (q->batch) {
		struct fsrd *s = q->batch;
		q->batch = s->next;
		s->next = rev;
		rev = s;
	}
	while (rev) {
		struct fsrd *s = rev;
		rev = s->next;
		s->next = srd_pending;
		srd_pending = s;
		srd_npending++;
		q->sq_used++;
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

// srd_deliver tries one SRD work request; 0 when it is done (delivered or
// failed), 1 when it must wait (receiver not ready: RNR, retried later).
static int srd_deliver(struct fsrd *s) {
	struct fqp *q = s->src;
	enum ibv_wc_opcode op = s->opcode == IBV_WR_SEND || s->opcode == IBV_WR_SEND_WITH_IMM ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
	if (q->x.qp_base.state == IBV_QPS_ERR) {
		complete_send(q, s->wr_id, IBV_WC_WR_FLUSH_ERR, op, 0, 1);
		return 0;
	}
	struct fqp *dst = qp_by_num(s->rqpn);
	struct fdev *dd = dst ? fdev_of(dst->x.qp_base.context) : NULL;
	int reachable = dst && dst->srd && dst->x.qp_base.state == IBV_QPS_RTS && dd->kind == KIND_EFA &&
	                !memcmp(s->ah->attr.grh.dgid.raw, dd->gids[0].raw, 16) && s->rqkey == dst->qkey;
	if (!reachable) {
		complete_send(q, s->wr_id, IBV_WC_RETRY_EXC_ERR, op, 0, 1);
		return 0;
	}
	const uint8_t *src = s->inline_data ? s->inline_data : (const uint8_t *)(uintptr_t)s->laddr;
	struct frecv r;
	switch (s->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: {
		// EFA accepts an RDMA write only from a sender the receiver holds
		// an address handle for; otherwise "remote operation error".
		struct fdev *sd = fdev_of(q->x.qp_base.context);
		int known = 0;
		for (struct fah *h = ahs; h && !known; h = h->next)
			known = h->ah.pd == dst->x.qp_base.pd && !memcmp(h->attr.grh.dgid.raw, sd->gids[0].raw, 16);
		if (!known) {
			complete_send(q, s->wr_id, IBV_WC_REM_OP_ERR, op, 0, 1);
			return 0;
		}
		uint8_t *to = remote_ptr(dst, s->rkey, s->raddr, s->len);
		if (!to) {
			complete_send(q, s->wr_id, IBV_WC_REM_ACCESS_ERR, op, 0, 1);
			return 0;
		}
		if (s->has_imm && take_recv(dst, &r) != 0) return 1;
		if (s->len) place(to, src, s->len);
		if (s->has_imm)
			complete_recv(dst, &r, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, s->len, 1, s->imm, q->x.qp_base.qp_num);
		break;
	}
	default:
		if (take_recv(dst, &r) != 0) return 1;
		if (s->len > r.len || (s->len && !local_ok(dst, r.lkey, r.addr, s->len))) {
			complete_recv(dst, &r, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, s->len, 0, 0, q->x.qp_base.qp_num);
			complete_send(q, s->wr_id, IBV_WC_REM_INV_REQ_ERR, op, 0, 1);
			return 0;
		}
		if (s->len) place((uint8_t *)(uintptr_t)r.addr, src, s->len);
		complete_recv(dst, &r, IBV_WC_SUCCESS, IBV_WC_RECV, s->len, s->has_imm, s->imm, q->x.qp_base.qp_num);
	}
	complete_send(q, s->wr_id, IBV_WC_SUCCESS, op, s->len, s->signaled);
	return 0;
}

// srd_progress delivers up to budget pending SRD work requests, each time
// picking one at random: SRD does not keep order. mu is held.
static void srd_progress(int budget) {
	for (int tries = 0; budget > 0 && srd_npending > 0 && tries < 4 * budget; tries++) {
		int k = (int)(rnd() % (uint64_t)srd_npending);
		struct fsrd **pp = &srd_pending;
		while (k-- > 0) pp = &(*pp)->next;
		struct fsrd *s = *pp;
		if (srd_deliver(s) != 0) continue; // RNR: stays pending
		*pp = s->next;
		srd_npending--;
		free(s->inline_data);
		free(s);
		budget--;
	}
}

// ---- efadv -----------------------------------------------------------------------

struct fake_efadv_device_attr {
	uint64_t comp_mask;
	uint32_t max_sq_wr, max_rq_wr;
	uint16_t max_sq_sge, max_rq_sge, inline_buf_size;
	uint8_t reserved[2];
	uint32_t device_caps, max_rdma_size;
};

API int efadv_query_device(struct ibv_context *c, void *attr, uint32_t inlen) {
	if (fdev_of(c)->kind != KIND_EFA) return EOPNOTSUPP;
	struct fake_efadv_device_attr a;
	memset(&a, 0, sizeof a);
	a.max_sq_wr = 4096;
	a.max_rq_wr = 4096;
	a.max_sq_sge = 2;
	a.max_rq_sge = 2;
	a.inline_buf_size = 32;
	a.device_caps = (uint32_t)env_int("FAKEVERBS_EFA_CAPS", 1 | 2 | 8); // RDMA read, RNR retry, RDMA write
	a.max_rdma_size = 1u << 30;
	memset(attr, 0, inlen);
	memcpy(attr, &a, inlen < sizeof a ? inlen : sizeof a);
	return 0;
}

struct fake_efadv_qp_init_attr {
	uint64_t comp_mask;
	uint32_t driver_qp_type;
	uint16_t flags;
	uint8_t sl;
	uint8_t reserved[1];
};

API struct ibv_qp *efadv_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a, void *efa_attr,
                                      uint32_t inlen) {
	struct fake_efadv_qp_init_attr e;
	memset(&e, 0, sizeof e);
	memcpy(&e, efa_attr, inlen < sizeof e ? inlen : sizeof e);
	if (fdev_of(c)->kind != KIND_EFA || a->qp_type != IBV_QPT_DRIVER || e.driver_qp_type != 0 || e.comp_mask ||
	    !(a->comp_mask & IBV_QP_INIT_ATTR_PD) || a->srq || a->sq_sig_all) {
		errno = EINVAL;
		return NULL;
	}
	uint32_t caps = (uint32_t)env_int("FAKEVERBS_EFA_CAPS", 1 | 2 | 8);
	if ((a->send_ops_flags & (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)) && !(caps & 8)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (e.flags && !(caps & 16)) {
		errno = EINVAL; // old libefa: the bytes were reserved
		return NULL;
	}
	struct fqp *q = new_qp(a->pd, a->send_cq, a->recv_cq, &a->cap, IBV_QPT_DRIVER, 1);
	return q ? &q->x.qp_base : NULL;
}
