//go:build cgo

// shim.c: libibverbs and libefa through dlopen. See shim.h for the contract.
//
// Why this file exists: libibverbs' public API is half exported functions,
// half static inline wrappers in verbs.h that call through function pointers
// the provider installed (ctx->ops.post_send, ibv_qp_ex->wr_rdma_write, the
// extended query_port op of struct verbs_context, ...), and several names
// (ibv_reg_mr, ibv_query_port) are macros that pick between exported symbols
// at compile time. Calling any of them from here would make the linker want
// libibverbs. So this file never calls a verbs.h function or macro: exported
// functions are called through pointers from dlvsym (with the symbol version
// the headers were written for), inline ones are re-implemented here on the
// same struct fields, and only rdma-core's types and constants are used.
// TestNoLinkTimeVerbsDependency checks that the test binary imports no ibv_
// or efadv_ symbol and no libibverbs/libefa.

#define _GNU_SOURCE
#include "shim.h"

#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(MK_NO_RDMA_HEADERS) && __has_include(<infiniband/verbs.h>)
#define MK_HAVE_VERBS 1
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#if __has_include(<infiniband/efadv.h>)
#define MK_HAVE_EFADV 1
#include <infiniband/efadv.h>
#else
#define MK_HAVE_EFADV 0
#endif
#else
#define MK_HAVE_VERBS 0
#define MK_HAVE_EFADV 0
#endif

int mk_built(void) { return (MK_HAVE_VERBS ? 1 : 0) | (MK_HAVE_EFADV ? 2 : 0); }

#if MK_HAVE_VERBS

// The ABI values shim.h (and Go) use must be the header's.
#define MK_SAME(a, b) _Static_assert((a) == (b), #a " must equal " #b)
MK_SAME(MK_IBV_QPS_RESET, IBV_QPS_RESET);
MK_SAME(MK_IBV_QPS_INIT, IBV_QPS_INIT);
MK_SAME(MK_IBV_QPS_RTR, IBV_QPS_RTR);
MK_SAME(MK_IBV_QPS_RTS, IBV_QPS_RTS);
MK_SAME(MK_IBV_QPS_ERR, IBV_QPS_ERR);
MK_SAME(MK_IBV_QP_STATE, IBV_QP_STATE);
MK_SAME(MK_IBV_QP_ACCESS_FLAGS, IBV_QP_ACCESS_FLAGS);
MK_SAME(MK_IBV_QP_PKEY_INDEX, IBV_QP_PKEY_INDEX);
MK_SAME(MK_IBV_QP_PORT, IBV_QP_PORT);
MK_SAME(MK_IBV_QP_QKEY, IBV_QP_QKEY);
MK_SAME(MK_IBV_QP_AV, IBV_QP_AV);
MK_SAME(MK_IBV_QP_PATH_MTU, IBV_QP_PATH_MTU);
MK_SAME(MK_IBV_QP_TIMEOUT, IBV_QP_TIMEOUT);
MK_SAME(MK_IBV_QP_RETRY_CNT, IBV_QP_RETRY_CNT);
MK_SAME(MK_IBV_QP_RNR_RETRY, IBV_QP_RNR_RETRY);
MK_SAME(MK_IBV_QP_RQ_PSN, IBV_QP_RQ_PSN);
MK_SAME(MK_IBV_QP_MAX_QP_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC);
MK_SAME(MK_IBV_QP_MIN_RNR_TIMER, IBV_QP_MIN_RNR_TIMER);
MK_SAME(MK_IBV_QP_SQ_PSN, IBV_QP_SQ_PSN);
MK_SAME(MK_IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_DEST_RD_ATOMIC);
MK_SAME(MK_IBV_QP_DEST_QPN, IBV_QP_DEST_QPN);
MK_SAME(MK_IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_LOCAL_WRITE);
MK_SAME(MK_IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_WRITE);
MK_SAME(MK_IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_READ);
MK_SAME(MK_IBV_ACCESS_RELAXED_ORDERING, IBV_ACCESS_RELAXED_ORDERING);
MK_SAME(MK_IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE);
MK_SAME(MK_IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_RDMA_WRITE_WITH_IMM);
MK_SAME(MK_IBV_WR_SEND, IBV_WR_SEND);
MK_SAME(MK_IBV_WR_SEND_WITH_IMM, IBV_WR_SEND_WITH_IMM);
MK_SAME(MK_IBV_WR_RDMA_READ, IBV_WR_RDMA_READ);
MK_SAME(MK_IBV_SEND_FENCE, IBV_SEND_FENCE);
MK_SAME(MK_IBV_SEND_SIGNALED, IBV_SEND_SIGNALED);
MK_SAME(MK_IBV_SEND_SOLICITED, IBV_SEND_SOLICITED);
MK_SAME(MK_IBV_SEND_INLINE, IBV_SEND_INLINE);
MK_SAME(MK_IBV_WC_WITH_IMM, IBV_WC_WITH_IMM);
MK_SAME(MK_IBV_WC_SEND, IBV_WC_SEND);
MK_SAME(MK_IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE);
MK_SAME(MK_IBV_WC_RDMA_READ, IBV_WC_RDMA_READ);
MK_SAME(MK_IBV_WC_RECV, IBV_WC_RECV);
MK_SAME(MK_IBV_WC_RECV_RDMA_WITH_IMM, IBV_WC_RECV_RDMA_WITH_IMM);
MK_SAME(MK_IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE);
MK_SAME(MK_IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);
MK_SAME(MK_IBV_QP_EX_WITH_SEND, IBV_QP_EX_WITH_SEND);
MK_SAME(MK_IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_IMM);
MK_SAME(MK_IBV_QP_EX_WITH_RDMA_READ, IBV_QP_EX_WITH_RDMA_READ);
MK_SAME(MK_IBV_LINK_LAYER_UNSPECIFIED, IBV_LINK_LAYER_UNSPECIFIED);
MK_SAME(MK_IBV_LINK_LAYER_INFINIBAND, IBV_LINK_LAYER_INFINIBAND);
MK_SAME(MK_IBV_LINK_LAYER_ETHERNET, IBV_LINK_LAYER_ETHERNET);
MK_SAME(MK_GID_TYPE_IB, IBV_GID_TYPE_IB);
MK_SAME(MK_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V1);
MK_SAME(MK_GID_TYPE_ROCE_V2, IBV_GID_TYPE_ROCE_V2);
MK_SAME(MK_IBV_PORT_ACTIVE, IBV_PORT_ACTIVE);
_Static_assert(sizeof(mk_gid_entry) == sizeof(struct ibv_gid_entry), "mk_gid_entry mirrors ibv_gid_entry");
_Static_assert(offsetof(mk_gid_entry, ifindex) == offsetof(struct ibv_gid_entry, ndev_ifindex),
               "mk_gid_entry mirrors ibv_gid_entry");

// efadv_qp_init_attr as rdma-core >= 52 lays it out (flags and sl replace
// the first three reserved bytes of older headers; same size), and the
// 32-byte prefix of efadv_device_attr every libefa fills. Passing our own
// layouts with an explicit inlen is how efadv's compat scheme is meant to be
// used; old libefa rejects non-zero flags/sl, so they are set only when the
// device reports the matching capability (or the caller asks for an SL).
struct mk_efadv_qp_init_attr {
	uint64_t comp_mask;
	uint32_t driver_qp_type;
	uint16_t flags;
	uint8_t sl;
	uint8_t reserved[1];
};
struct mk_efadv_device_attr {
	uint64_t comp_mask;
	uint32_t max_sq_wr;
	uint32_t max_rq_wr;
	uint16_t max_sq_sge;
	uint16_t max_rq_sge;
	uint16_t inline_buf_size;
	uint8_t reserved[2];
	uint32_t device_caps;
	uint32_t max_rdma_size;
};
#define MK_EFADV_QP_DRIVER_TYPE_SRD 0
#if MK_HAVE_EFADV
_Static_assert(sizeof(struct mk_efadv_qp_init_attr) == sizeof(struct efadv_qp_init_attr), "efadv_qp_init_attr layout");
_Static_assert(offsetof(struct mk_efadv_device_attr, max_rdma_size) ==
                   offsetof(struct efadv_device_attr, max_rdma_size),
               "efadv_device_attr layout");
MK_SAME(MK_EFADV_QP_DRIVER_TYPE_SRD, EFADV_QP_DRIVER_TYPE_SRD);
MK_SAME(MK_EFADV_CAPS_RDMA_READ, EFADV_DEVICE_ATTR_CAPS_RDMA_READ);
MK_SAME(MK_EFADV_CAPS_RNR_RETRY, EFADV_DEVICE_ATTR_CAPS_RNR_RETRY);
#endif

// The entry points, by the symbol version of the ABI these headers
// describe. X(field, name, version, required).
#define MK_VERBS_SYMBOLS(X)                                                                     \
	X(get_device_list, "ibv_get_device_list", "IBVERBS_1.1", 1)                             \
	X(free_device_list, "ibv_free_device_list", "IBVERBS_1.1", 1)                           \
	X(get_device_name, "ibv_get_device_name", "IBVERBS_1.1", 1)                             \
	X(get_device_guid, "ibv_get_device_guid", "IBVERBS_1.1", 1)                             \
	X(open_device, "ibv_open_device", "IBVERBS_1.1", 1)                                     \
	X(close_device, "ibv_close_device", "IBVERBS_1.1", 1)                                   \
	X(query_device, "ibv_query_device", "IBVERBS_1.1", 1)                                   \
	X(query_port, "ibv_query_port", "IBVERBS_1.1", 1)                                       \
	X(query_gid, "ibv_query_gid", "IBVERBS_1.1", 1)                                         \
	X(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1", 1)                                           \
	X(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1", 1)                                       \
	X(reg_mr, "ibv_reg_mr", "IBVERBS_1.1", 1)                                               \
	X(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1", 1)                                           \
	X(create_cq, "ibv_create_cq", "IBVERBS_1.1", 1)                                         \
	X(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1", 1)                                       \
	X(create_qp, "ibv_create_qp", "IBVERBS_1.1", 1)                                         \
	X(modify_qp, "ibv_modify_qp", "IBVERBS_1.1", 1)                                         \
	X(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1", 1)                                       \
	X(create_ah, "ibv_create_ah", "IBVERBS_1.1", 1)                                         \
	X(destroy_ah, "ibv_destroy_ah", "IBVERBS_1.1", 1)                                       \
	X(qp_to_qp_ex, "ibv_qp_to_qp_ex", "IBVERBS_1.6", 0)                                     \
	X(reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8", 0)                                   \
	X(query_gid_table, "_ibv_query_gid_table", "IBVERBS_1.11", 0)                           \
	X(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", 0)

struct mk_lib {
	void *handle;
	void *efa_handle;
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	__be64 (*get_device_guid)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_device)(struct ibv_context *, struct ibv_device_attr *);
	int (*query_port)(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
	int (*destroy_cq)(struct ibv_cq *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*destroy_qp)(struct ibv_qp *);
	struct ibv_ah *(*create_ah)(struct ibv_pd *, struct ibv_ah_attr *);
	int (*destroy_ah)(struct ibv_ah *);
	struct ibv_qp_ex *(*qp_to_qp_ex)(struct ibv_qp *);
	struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned int);
	ssize_t (*query_gid_table)(struct ibv_context *, struct ibv_gid_entry *, size_t, uint32_t, size_t);
	struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
	// libefa
	int (*efadv_query_device)(struct ibv_context *, struct mk_efadv_device_attr *, uint32_t);
	struct ibv_qp *(*efadv_create_qp_ex)(struct ibv_context *, struct ibv_qp_init_attr_ex *,
	                                     struct mk_efadv_qp_init_attr *, uint32_t);
};

// mk_sym resolves name at version, falling back to the default version (a
// library built without symbol versioning).
static void *mk_sym(void *h, const char *name, const char *version) {
	void *p = dlvsym(h, name, version);
	return p != NULL ? p : dlsym(h, name);
}

static int mk_dlopen(const char *path, void **h, char *msg, size_t msglen) {
	dlerror();
	*h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (*h == NULL) {
		const char *e = dlerror();
		snprintf(msg, msglen, "%s", e != NULL ? e : "dlopen failed");
		return MK_ERR_NO_LIBRARY;
	}
	return 0;
}

int mk_lib_open(const char *path, mk_lib **out, char *msg, size_t msglen) {
	*out = NULL;
	mk_lib *l = calloc(1, sizeof *l);
	if (l == NULL) return ENOMEM;
	int rc = mk_dlopen(path, &l->handle, msg, msglen);
	if (rc != 0) {
		free(l);
		return rc;
	}
#define MK_RESOLVE(field, name, version, required)                \
	*(void **)(&l->field) = mk_sym(l->handle, name, version); \
	if (l->field == NULL && (required)) {                     \
		snprintf(msg, msglen, "%s", name);                \
		dlclose(l->handle);                               \
		free(l);                                          \
		return MK_ERR_NO_SYMBOL;                          \
	}
	MK_VERBS_SYMBOLS(MK_RESOLVE)
#undef MK_RESOLVE
	*out = l;
	return 0;
}

int mk_lib_open_efa(mk_lib *l, const char *path, char *msg, size_t msglen) {
	if (l->efa_handle != NULL) return 0;
	void *h;
	int rc = mk_dlopen(path, &h, msg, msglen);
	if (rc != 0) return rc;
	*(void **)(&l->efadv_query_device) = mk_sym(h, "efadv_query_device", "EFA_1.1");
	*(void **)(&l->efadv_create_qp_ex) = mk_sym(h, "efadv_create_qp_ex", "EFA_1.1");
	if (l->efadv_query_device == NULL || l->efadv_create_qp_ex == NULL) {
		snprintf(msg, msglen, "%s", l->efadv_query_device == NULL ? "efadv_query_device" : "efadv_create_qp_ex");
		l->efadv_query_device = NULL;
		l->efadv_create_qp_ex = NULL;
		dlclose(h);
		return MK_ERR_NO_SYMBOL;
	}
	l->efa_handle = h;
	return 0;
}

int mk_lib_features(const mk_lib *l) {
	return (l->reg_dmabuf_mr ? MK_FEAT_DMABUF : 0) | (l->reg_mr_iova2 ? MK_FEAT_IOVA2 : 0) |
	       (l->query_gid_table ? MK_FEAT_GID_TABLE : 0) | (l->qp_to_qp_ex ? MK_FEAT_QP_EX : 0) |
	       (l->efa_handle ? MK_FEAT_EFA : 0);
}

// mk_errno returns errno, or EIO when a failing call left it unset.
static int mk_errno(void) { return errno != 0 ? errno : EIO; }

int mk_list_devices(const mk_lib *l, mk_device_info *out, int max, int *n) {
	*n = 0;
	errno = 0;
	int num = 0;
	struct ibv_device **list = l->get_device_list(&num);
	if (list == NULL) return mk_errno();
	for (int i = 0; i < num && i < max; i++) {
		memset(&out[i], 0, sizeof out[i]);
		const char *name = l->get_device_name(list[i]);
		snprintf(out[i].name, sizeof out[i].name, "%s", name != NULL ? name : "");
		out[i].guid = be64toh(l->get_device_guid(list[i]));
		out[i].node_type = list[i]->node_type;
		out[i].transport_type = list[i]->transport_type;
	}
	*n = num;
	l->free_device_list(list);
	return 0;
}

int mk_open_device(const mk_lib *l, const char *name, uintptr_t *ctx) {
	*ctx = 0;
	errno = 0;
	int num = 0;
	struct ibv_device **list = l->get_device_list(&num);
	if (list == NULL) return mk_errno();
	int rc = ENODEV;
	for (int i = 0; i < num; i++) {
		const char *n = l->get_device_name(list[i]);
		if (n == NULL || strcmp(n, name) != 0) continue;
		errno = 0;
		struct ibv_context *c = l->open_device(list[i]);
		rc = c != NULL ? 0 : mk_errno();
		*ctx = (uintptr_t)c;
		break;
	}
	l->free_device_list(list);
	return rc;
}

int mk_close_device(const mk_lib *l, uintptr_t ctx) {
	errno = 0;
	return l->close_device((struct ibv_context *)ctx) == 0 ? 0 : mk_errno();
}

int mk_query_device(const mk_lib *l, uintptr_t ctx, mk_device_attr *out) {
	struct ibv_device_attr a;
	memset(&a, 0, sizeof a);
	memset(out, 0, sizeof *out);
	int rc = l->query_device((struct ibv_context *)ctx, &a);
	if (rc != 0) return rc;
	out->max_mr_size = a.max_mr_size;
	out->node_guid = be64toh(a.node_guid);
	out->vendor_id = a.vendor_id;
	out->vendor_part_id = a.vendor_part_id;
	out->hw_ver = a.hw_ver;
	out->max_qp = a.max_qp;
	out->max_qp_wr = a.max_qp_wr;
	out->max_sge = a.max_sge;
	out->max_cq = a.max_cq;
	out->max_cqe = a.max_cqe;
	out->max_mr = a.max_mr;
	out->max_pd = a.max_pd;
	out->max_ah = a.max_ah;
	out->max_qp_rd_atom = a.max_qp_rd_atom;
	out->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
	out->phys_port_cnt = a.phys_port_cnt;
	snprintf(out->fw_ver, sizeof out->fw_ver, "%s", a.fw_ver);
	return 0;
}

int mk_query_port(const mk_lib *l, uintptr_t ctx, uint8_t port, mk_port_attr *out) {
	struct ibv_context *c = (struct ibv_context *)ctx;
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	memset(out, 0, sizeof *out);
	// What verbs.h's ___ibv_query_port does: the extended op, sized by our
	// struct, when the provider has one; else the exported compat entry
	// point, which fills the older prefix of the struct.
	struct verbs_context *v = verbs_get_ctx_op(c, query_port);
	int rc = v != NULL ? v->query_port(c, port, &a, sizeof a)
	                   : l->query_port(c, port, (struct _compat_ibv_port_attr *)&a);
	if (rc != 0) return rc;
	out->state = a.state;
	out->max_mtu = a.max_mtu;
	out->active_mtu = a.active_mtu;
	out->gid_tbl_len = a.gid_tbl_len;
	out->port_cap_flags = a.port_cap_flags;
	out->max_msg_sz = a.max_msg_sz;
	out->lid = a.lid;
	out->sm_lid = a.sm_lid;
	out->lmc = a.lmc;
	out->link_layer = a.link_layer;
	out->active_width = a.active_width;
	out->active_speed = a.active_speed;
	out->phys_state = a.phys_state;
	return 0;
}

int mk_query_gid_table(const mk_lib *l, uintptr_t ctx, mk_gid_entry *out, int max, int *n) {
	*n = 0;
	if (l->query_gid_table == NULL) return MK_ERR_NO_FEATURE;
	errno = 0;
	ssize_t r = l->query_gid_table((struct ibv_context *)ctx, (struct ibv_gid_entry *)out, (size_t)max, 0,
	                               sizeof(struct ibv_gid_entry));
	if (r < 0) return r == -1 ? mk_errno() : (int)-r;
	*n = (int)r;
	return 0;
}

int mk_query_gid(const mk_lib *l, uintptr_t ctx, uint8_t port, int index, uint8_t gid[16]) {
	union ibv_gid g;
	memset(&g, 0, sizeof g);
	errno = 0;
	if (l->query_gid((struct ibv_context *)ctx, port, index, &g) != 0) return mk_errno();
	memcpy(gid, g.raw, 16);
	return 0;
}

int mk_alloc_pd(const mk_lib *l, uintptr_t ctx, uintptr_t *pd) {
	errno = 0;
	struct ibv_pd *p = l->alloc_pd((struct ibv_context *)ctx);
	*pd = (uintptr_t)p;
	return p != NULL ? 0 : mk_errno();
}

int mk_dealloc_pd(const mk_lib *l, uintptr_t pd) { return l->dealloc_pd((struct ibv_pd *)pd); }

static int mk_mr_out(struct ibv_mr *m, mk_mr *out) {
	if (m == NULL) return mk_errno();
	out->mr = (uintptr_t)m;
	out->lkey = m->lkey;
	out->rkey = m->rkey;
	return 0;
}

int mk_reg_mr(const mk_lib *l, uintptr_t pd, uint64_t addr, uint64_t len, int access, mk_mr *out) {
	memset(out, 0, sizeof *out);
	errno = 0;
	struct ibv_pd *p = (struct ibv_pd *)pd;
	// The ibv_reg_mr macro's choice: optional access bits need the iova2
	// entry point (which drops them on kernels that cannot honour them).
	if ((access & IBV_ACCESS_OPTIONAL_RANGE) != 0) {
		if (l->reg_mr_iova2 != NULL)
			return mk_mr_out(l->reg_mr_iova2(p, (void *)(uintptr_t)addr, len, addr, (unsigned)access), out);
		access &= ~IBV_ACCESS_OPTIONAL_RANGE;
	}
	return mk_mr_out(l->reg_mr(p, (void *)(uintptr_t)addr, len, access), out);
}

int mk_reg_dmabuf_mr(const mk_lib *l, uintptr_t pd, uint64_t offset, uint64_t len, uint64_t iova, int fd,
                     int access, mk_mr *out) {
	memset(out, 0, sizeof *out);
	if (l->reg_dmabuf_mr == NULL) return MK_ERR_NO_FEATURE;
	errno = 0;
	return mk_mr_out(l->reg_dmabuf_mr((struct ibv_pd *)pd, offset, len, iova, fd, access), out);
}

int mk_dereg_mr(const mk_lib *l, uintptr_t mr) { return l->dereg_mr((struct ibv_mr *)mr); }

int mk_create_cq(const mk_lib *l, uintptr_t ctx, int cqe, uintptr_t *cq, int *actual) {
	errno = 0;
	struct ibv_cq *c = l->create_cq((struct ibv_context *)ctx, cqe, NULL, NULL, 0);
	*cq = (uintptr_t)c;
	*actual = c != NULL ? c->cqe : 0;
	return c != NULL ? 0 : mk_errno();
}

int mk_destroy_cq(const mk_lib *l, uintptr_t cq) { return l->destroy_cq((struct ibv_cq *)cq); }

int mk_create_qp(const mk_lib *l, uintptr_t pd, uintptr_t send_cq, uintptr_t recv_cq, const mk_qp_init *in,
                 mk_qp *out) {
	memset(out, 0, sizeof *out);
	struct ibv_qp_cap cap = {
	    .max_send_wr = in->max_send_wr,
	    .max_recv_wr = in->max_recv_wr,
	    .max_send_sge = in->max_send_sge,
	    .max_recv_sge = in->max_recv_sge,
	    .max_inline_data = in->max_inline_data,
	};
	struct ibv_qp *qp = NULL;
	errno = 0;
	switch (in->kind) {
	case MK_QP_RC: {
		struct ibv_qp_init_attr a;
		memset(&a, 0, sizeof a);
		a.send_cq = (struct ibv_cq *)send_cq;
		a.recv_cq = (struct ibv_cq *)recv_cq;
		a.cap = cap;
		a.qp_type = IBV_QPT_RC;
		a.sq_sig_all = 0;
		qp = l->create_qp((struct ibv_pd *)pd, &a);
		cap = a.cap;
		break;
	}
	case MK_QP_SRD: {
		if (l->efadv_create_qp_ex == NULL || l->qp_to_qp_ex == NULL) return MK_ERR_NO_FEATURE;
		struct ibv_pd *p = (struct ibv_pd *)pd;
		struct ibv_qp_init_attr_ex a;
		memset(&a, 0, sizeof a);
		a.send_cq = (struct ibv_cq *)send_cq;
		a.recv_cq = (struct ibv_cq *)recv_cq;
		a.cap = cap;
		a.qp_type = IBV_QPT_DRIVER;
		a.sq_sig_all = 0;
		a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.pd = p;
		a.send_ops_flags = in->send_ops_flags;
		struct mk_efadv_qp_init_attr e;
		memset(&e, 0, sizeof e);
		e.driver_qp_type = MK_EFADV_QP_DRIVER_TYPE_SRD;
		e.flags = in->efa_flags;
		e.sl = in->efa_sl;
		qp = l->efadv_create_qp_ex(p->context, &a, &e, sizeof e);
		cap = a.cap;
		break;
	}
	default:
		return EINVAL;
	}
	if (qp == NULL) return mk_errno();
	out->qp = (uintptr_t)qp;
	out->qpn = qp->qp_num;
	out->max_send_wr = cap.max_send_wr;
	out->max_recv_wr = cap.max_recv_wr;
	out->max_inline_data = cap.max_inline_data;
	if (in->kind == MK_QP_SRD) {
		struct ibv_qp_ex *x = l->qp_to_qp_ex(qp);
		if (x == NULL) {
			int rc = mk_errno();
			l->destroy_qp(qp);
			memset(out, 0, sizeof *out);
			return rc;
		}
		out->qpx = (uintptr_t)x;
	}
	return 0;
}

int mk_destroy_qp(const mk_lib *l, uintptr_t qp) { return l->destroy_qp((struct ibv_qp *)qp); }

static void mk_ah_from(const mk_ah_attr *in, struct ibv_ah_attr *a) {
	memset(a, 0, sizeof *a);
	memcpy(a->grh.dgid.raw, in->dgid, 16);
	a->grh.flow_label = in->flow_label;
	a->grh.sgid_index = in->sgid_index;
	a->grh.hop_limit = in->hop_limit;
	a->grh.traffic_class = in->traffic_class;
	a->dlid = in->dlid;
	a->sl = in->sl;
	a->src_path_bits = in->src_path_bits;
	a->static_rate = in->static_rate;
	a->is_global = in->is_global;
	a->port_num = in->port_num;
}

int mk_modify_qp(const mk_lib *l, uintptr_t qp, const mk_qp_attr *in, int mask) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = (enum ibv_qp_state)in->qp_state;
	a.path_mtu = (enum ibv_mtu)in->path_mtu;
	a.qkey = in->qkey;
	a.rq_psn = in->rq_psn;
	a.sq_psn = in->sq_psn;
	a.dest_qp_num = in->dest_qp_num;
	a.qp_access_flags = in->qp_access_flags;
	mk_ah_from(&in->ah, &a.ah_attr);
	a.pkey_index = in->pkey_index;
	a.port_num = in->port_num;
	a.max_rd_atomic = in->max_rd_atomic;
	a.max_dest_rd_atomic = in->max_dest_rd_atomic;
	a.min_rnr_timer = in->min_rnr_timer;
	a.timeout = in->timeout;
	a.retry_cnt = in->retry_cnt;
	a.rnr_retry = in->rnr_retry;
	errno = 0;
	int rc = l->modify_qp((struct ibv_qp *)qp, &a, mask);
	return rc == 0 ? 0 : (rc > 0 ? rc : mk_errno());
}

int mk_create_ah(const mk_lib *l, uintptr_t pd, const mk_ah_attr *in, uintptr_t *ah) {
	struct ibv_ah_attr a;
	mk_ah_from(in, &a);
	errno = 0;
	struct ibv_ah *h = l->create_ah((struct ibv_pd *)pd, &a);
	*ah = (uintptr_t)h;
	return h != NULL ? 0 : mk_errno();
}

int mk_destroy_ah(const mk_lib *l, uintptr_t ah) { return l->destroy_ah((struct ibv_ah *)ah); }

int mk_post_send(uintptr_t qpv, const mk_send_wr *wrs, int n, int *posted) {
	struct ibv_qp *qp = (struct ibv_qp *)qpv;
	struct ibv_send_wr wr[MK_POST_CHUNK];
	struct ibv_sge sge[MK_POST_CHUNK];
	*posted = 0;
	for (int base = 0; base < n; base += MK_POST_CHUNK) {
		int k = n - base < MK_POST_CHUNK ? n - base : MK_POST_CHUNK;
		memset(wr, 0, sizeof wr[0] * (size_t)k);
		for (int i = 0; i < k; i++) {
			const mk_send_wr *w = &wrs[base + i];
			wr[i].wr_id = w->wr_id;
			wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
			wr[i].opcode = (enum ibv_wr_opcode)w->opcode;
			wr[i].send_flags = w->flags;
			wr[i].imm_data = htonl(w->imm);
			wr[i].wr.rdma.remote_addr = w->remote_addr;
			wr[i].wr.rdma.rkey = w->rkey;
			if (w->length > 0) {
				// An inline 8-byte write sends inline_value: the provider
				// copies inline data into the WQE before post_send returns.
				int inl = (w->flags & IBV_SEND_INLINE) != 0 && w->length == sizeof w->inline_value;
				sge[i].addr = inl ? (uint64_t)(uintptr_t)&w->inline_value : w->local_addr;
				sge[i].length = w->length;
				sge[i].lkey = w->lkey;
				wr[i].sg_list = &sge[i];
				wr[i].num_sge = 1;
			}
		}
		struct ibv_send_wr *bad = NULL;
		int rc = qp->context->ops.post_send(qp, wr, &bad);
		if (rc != 0) {
			*posted += bad != NULL ? (int)(bad - wr) : 0;
			return rc;
		}
		*posted += k;
	}
	return 0;
}

int mk_post_send_ex(uintptr_t qpxv, const mk_send_wr *wrs, int n) {
	struct ibv_qp_ex *x = (struct ibv_qp_ex *)qpxv;
	x->wr_start(x);
	for (int i = 0; i < n; i++) {
		const mk_send_wr *w = &wrs[i];
		x->wr_id = w->wr_id;
		x->wr_flags = w->flags & ~(unsigned)IBV_SEND_INLINE;
		switch (w->opcode) {
		case IBV_WR_RDMA_WRITE:
			x->wr_rdma_write(x, w->rkey, w->remote_addr);
			break;
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			x->wr_rdma_write_imm(x, w->rkey, w->remote_addr, htonl(w->imm));
			break;
		case IBV_WR_SEND:
			x->wr_send(x);
			break;
		case IBV_WR_SEND_WITH_IMM:
			x->wr_send_imm(x, htonl(w->imm));
			break;
		default:
			x->wr_abort(x);
			return EINVAL;
		}
		x->wr_set_ud_addr(x, (struct ibv_ah *)w->ah, w->remote_qpn, w->remote_qkey);
		if (w->length == 0)
			x->wr_set_sge_list(x, 0, NULL);
		else if ((w->flags & IBV_SEND_INLINE) != 0)
			x->wr_set_inline_data(x, (void *)(uintptr_t)w->local_addr, w->length);
		else
			x->wr_set_sge(x, w->lkey, w->local_addr, w->length);
	}
	return x->wr_complete(x);
}

int mk_post_recv(uintptr_t qpv, const mk_recv_wr *wrs, int n, int *posted) {
	struct ibv_qp *qp = (struct ibv_qp *)qpv;
	struct ibv_recv_wr wr[MK_POST_CHUNK];
	struct ibv_sge sge[MK_POST_CHUNK];
	*posted = 0;
	for (int base = 0; base < n; base += MK_POST_CHUNK) {
		int k = n - base < MK_POST_CHUNK ? n - base : MK_POST_CHUNK;
		memset(wr, 0, sizeof wr[0] * (size_t)k);
		for (int i = 0; i < k; i++) {
			const mk_recv_wr *w = &wrs[base + i];
			wr[i].wr_id = w->wr_id;
			wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
			if (w->length > 0) {
				sge[i].addr = w->addr;
				sge[i].length = w->length;
				sge[i].lkey = w->lkey;
				wr[i].sg_list = &sge[i];
				wr[i].num_sge = 1;
			}
		}
		struct ibv_recv_wr *bad = NULL;
		int rc = qp->context->ops.post_recv(qp, wr, &bad);
		if (rc != 0) {
			*posted += bad != NULL ? (int)(bad - wr) : 0;
			return rc;
		}
		*posted += k;
	}
	return 0;
}

int mk_poll_cq(uintptr_t cqv, mk_wc *out, int n) {
	struct ibv_cq *cq = (struct ibv_cq *)cqv;
	struct ibv_wc wc[MK_POST_CHUNK];
	int done = 0;
	while (done < n) {
		int want = n - done < MK_POST_CHUNK ? n - done : MK_POST_CHUNK;
		int got = cq->context->ops.poll_cq(cq, want, wc);
		if (got < 0) return done > 0 ? done : got;
		for (int i = 0; i < got; i++) {
			mk_wc *o = &out[done + i];
			o->wr_id = wc[i].wr_id;
			o->status = wc[i].status;
			o->opcode = wc[i].opcode;
			o->vendor_err = wc[i].vendor_err;
			o->byte_len = wc[i].byte_len;
			o->imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
			o->qp_num = wc[i].qp_num;
			o->src_qp = wc[i].src_qp;
			o->wc_flags = wc[i].wc_flags;
			o->slid = wc[i].slid;
			o->sl = wc[i].sl;
		}
		done += got;
		if (got < want) break;
	}
	return done;
}

int mk_efa_query_device(const mk_lib *l, uintptr_t ctx, mk_efa_attr *out) {
	memset(out, 0, sizeof *out);
	if (l->efadv_query_device == NULL) return MK_ERR_NO_FEATURE;
	struct mk_efadv_device_attr a;
	memset(&a, 0, sizeof a);
	int rc = l->efadv_query_device((struct ibv_context *)ctx, &a, sizeof a);
	if (rc != 0) return rc;
	out->max_sq_wr = a.max_sq_wr;
	out->max_rq_wr = a.max_rq_wr;
	out->max_sq_sge = a.max_sq_sge;
	out->max_rq_sge = a.max_rq_sge;
	out->inline_buf_size = a.inline_buf_size;
	out->device_caps = a.device_caps;
	out->max_rdma_size = a.max_rdma_size;
	return 0;
}

#else // !MK_HAVE_VERBS: the stub. Every entry point says the build lacks the headers.

int mk_lib_open(const char *path, mk_lib **out, char *msg, size_t msglen) {
	(void)path;
	*out = NULL;
	snprintf(msg, msglen, "built without rdma-core headers");
	return MK_ERR_NO_HEADERS;
}
int mk_lib_open_efa(mk_lib *l, const char *path, char *msg, size_t msglen) {
	(void)l, (void)path;
	snprintf(msg, msglen, "built without rdma-core headers");
	return MK_ERR_NO_HEADERS;
}
int mk_lib_features(const mk_lib *l) { return (void)l, 0; }
int mk_list_devices(const mk_lib *l, mk_device_info *o, int m, int *n) {
	return (void)l, (void)o, (void)m, *n = 0, MK_ERR_NO_HEADERS;
}
int mk_open_device(const mk_lib *l, const char *name, uintptr_t *c) {
	return (void)l, (void)name, *c = 0, MK_ERR_NO_HEADERS;
}
int mk_close_device(const mk_lib *l, uintptr_t c) { return (void)l, (void)c, MK_ERR_NO_HEADERS; }
int mk_query_device(const mk_lib *l, uintptr_t c, mk_device_attr *o) {
	return (void)l, (void)c, (void)o, MK_ERR_NO_HEADERS;
}
int mk_query_port(const mk_lib *l, uintptr_t c, uint8_t p, mk_port_attr *o) {
	return (void)l, (void)c, (void)p, (void)o, MK_ERR_NO_HEADERS;
}
int mk_query_gid_table(const mk_lib *l, uintptr_t c, mk_gid_entry *o, int m, int *n) {
	return (void)l, (void)c, (void)o, (void)m, *n = 0, MK_ERR_NO_HEADERS;
}
int mk_query_gid(const mk_lib *l, uintptr_t c, uint8_t p, int i, uint8_t g[16]) {
	return (void)l, (void)c, (void)p, (void)i, (void)g, MK_ERR_NO_HEADERS;
}
int mk_alloc_pd(const mk_lib *l, uintptr_t c, uintptr_t *pd) { return (void)l, (void)c, *pd = 0, MK_ERR_NO_HEADERS; }
int mk_dealloc_pd(const mk_lib *l, uintptr_t pd) { return (void)l, (void)pd, MK_ERR_NO_HEADERS; }
int mk_reg_mr(const mk_lib *l, uintptr_t pd, uint64_t a, uint64_t n, int acc, mk_mr *o) {
	return (void)l, (void)pd, (void)a, (void)n, (void)acc, (void)o, MK_ERR_NO_HEADERS;
}
int mk_reg_dmabuf_mr(const mk_lib *l, uintptr_t pd, uint64_t off, uint64_t n, uint64_t iova, int fd, int acc,
                     mk_mr *o) {
	return (void)l, (void)pd, (void)off, (void)n, (void)iova, (void)fd, (void)acc, (void)o, MK_ERR_NO_HEADERS;
}
int mk_dereg_mr(const mk_lib *l, uintptr_t mr) { return (void)l, (void)mr, MK_ERR_NO_HEADERS; }
int mk_create_cq(const mk_lib *l, uintptr_t c, int cqe, uintptr_t *cq, int *actual) {
	return (void)l, (void)c, (void)cqe, *cq = 0, *actual = 0, MK_ERR_NO_HEADERS;
}
int mk_destroy_cq(const mk_lib *l, uintptr_t cq) { return (void)l, (void)cq, MK_ERR_NO_HEADERS; }
int mk_create_qp(const mk_lib *l, uintptr_t pd, uintptr_t s, uintptr_t r, const mk_qp_init *in, mk_qp *o) {
	return (void)l, (void)pd, (void)s, (void)r, (void)in, (void)o, MK_ERR_NO_HEADERS;
}
int mk_destroy_qp(const mk_lib *l, uintptr_t qp) { return (void)l, (void)qp, MK_ERR_NO_HEADERS; }
int mk_modify_qp(const mk_lib *l, uintptr_t qp, const mk_qp_attr *a, int m) {
	return (void)l, (void)qp, (void)a, (void)m, MK_ERR_NO_HEADERS;
}
int mk_create_ah(const mk_lib *l, uintptr_t pd, const mk_ah_attr *a, uintptr_t *ah) {
	return (void)l, (void)pd, (void)a, *ah = 0, MK_ERR_NO_HEADERS;
}
int mk_destroy_ah(const mk_lib *l, uintptr_t ah) { return (void)l, (void)ah, MK_ERR_NO_HEADERS; }
int mk_post_send(uintptr_t qp, const mk_send_wr *w, int n, int *p) {
	return (void)qp, (void)w, (void)n, *p = 0, MK_ERR_NO_HEADERS;
}
int mk_post_send_ex(uintptr_t qpx, const mk_send_wr *w, int n) { return (void)qpx, (void)w, (void)n, MK_ERR_NO_HEADERS; }
int mk_post_recv(uintptr_t qp, const mk_recv_wr *w, int n, int *p) {
	return (void)qp, (void)w, (void)n, *p = 0, MK_ERR_NO_HEADERS;
}
int mk_poll_cq(uintptr_t cq, mk_wc *o, int n) { return (void)cq, (void)o, (void)n, MK_ERR_NO_HEADERS; }
int mk_efa_query_device(const mk_lib *l, uintptr_t c, mk_efa_attr *o) {
	return (void)l, (void)c, (void)o, MK_ERR_NO_HEADERS;
}

#endif
