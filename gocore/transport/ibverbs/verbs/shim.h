// shim.h: the C side of package verbs as Go sees it. Nothing here depends on
// rdma-core's headers: every type is our own, every verbs object crosses into
// Go as a uintptr_t handle, and shim.c translates. shim.c is compiled against
// <infiniband/verbs.h> and <infiniband/efadv.h> when they are installed and
// as a stub (every entry point fails with MK_ERR_NO_HEADERS) when they are
// not, so the package builds everywhere cgo does.
//
// Enum and flag values below are the verbs ABI's (they never change once
// released); shim.c static-asserts each against the header when it has one.
#ifndef MK_VERBS_SHIM_H
#define MK_VERBS_SHIM_H

#include <stddef.h>
#include <stdint.h>

// Results of the mk_* calls besides 0 and errno values.
enum {
	MK_ERR_NO_HEADERS = -1, // built without rdma-core headers
	MK_ERR_NO_LIBRARY = -2, // dlopen failed; msg holds dlerror()
	MK_ERR_NO_SYMBOL = -3,  // a required entry point is missing; msg names it
	MK_ERR_NO_FEATURE = -4, // an optional entry point this call needs is missing
};

// mk_lib is one dlopen'ed libibverbs.so.1 (and, once loaded, libefa.so.1).
// Opaque to Go; it lives until the process exits (never dlclosed: providers'
// code is reachable through function pointers in every object they made).
typedef struct mk_lib mk_lib;

// mk_built reports what this build of shim.c was compiled with:
// bit 0 verbs.h, bit 1 efadv.h.
int mk_built(void);

int mk_lib_open(const char *path, mk_lib **out, char *msg, size_t msglen);
int mk_lib_open_efa(mk_lib *lib, const char *path, char *msg, size_t msglen);
// mk_lib_features: bit 0 ibv_reg_dmabuf_mr, 1 ibv_reg_mr_iova2,
// 2 _ibv_query_gid_table, 3 ibv_qp_to_qp_ex, 4 libefa loaded.
int mk_lib_features(const mk_lib *lib);

enum {
	MK_FEAT_DMABUF = 1 << 0,
	MK_FEAT_IOVA2 = 1 << 1,
	MK_FEAT_GID_TABLE = 1 << 2,
	MK_FEAT_QP_EX = 1 << 3,
	MK_FEAT_EFA = 1 << 4,
};

#define MK_NAME_MAX 64

typedef struct {
	char name[MK_NAME_MAX];
	uint64_t guid; // host order
	int32_t node_type;
	int32_t transport_type;
} mk_device_info;

// mk_list_devices fills up to max entries and sets *n to the number of
// devices (which may exceed max).
int mk_list_devices(const mk_lib *lib, mk_device_info *out, int max, int *n);
int mk_open_device(const mk_lib *lib, const char *name, uintptr_t *ctx);
int mk_close_device(const mk_lib *lib, uintptr_t ctx);

typedef struct {
	uint64_t max_mr_size;
	uint64_t node_guid; // host order
	uint32_t vendor_id;
	uint32_t vendor_part_id;
	uint32_t hw_ver;
	int32_t max_qp;
	int32_t max_qp_wr;
	int32_t max_sge;
	int32_t max_cq;
	int32_t max_cqe;
	int32_t max_mr;
	int32_t max_pd;
	int32_t max_ah;
	int32_t max_qp_rd_atom;
	int32_t max_qp_init_rd_atom;
	uint8_t phys_port_cnt;
	char fw_ver[64];
} mk_device_attr;

int mk_query_device(const mk_lib *lib, uintptr_t ctx, mk_device_attr *out);

typedef struct {
	uint32_t state;
	uint32_t max_mtu;
	uint32_t active_mtu;
	int32_t gid_tbl_len;
	uint32_t port_cap_flags;
	uint32_t max_msg_sz;
	uint16_t lid;
	uint16_t sm_lid;
	uint8_t lmc;
	uint8_t link_layer;
	uint8_t active_width;
	uint8_t active_speed;
	uint8_t phys_state;
} mk_port_attr;

// mk_query_port goes through the provider's extended query_port op when the
// context has one (what the ibv_query_port macro does), else through the
// exported compatibility symbol.
int mk_query_port(const mk_lib *lib, uintptr_t ctx, uint8_t port, mk_port_attr *out);

typedef struct {
	uint8_t gid[16];
	uint32_t index;
	uint32_t port;
	uint32_t type;    // MK_GID_TYPE_*
	uint32_t ifindex; // netdev of a RoCE GID; 0 for none
} mk_gid_entry;

// mk_query_gid_table needs _ibv_query_gid_table (rdma-core >= 31); without
// it the call returns MK_ERR_NO_FEATURE and Go reads sysfs instead.
int mk_query_gid_table(const mk_lib *lib, uintptr_t ctx, mk_gid_entry *out, int max, int *n);
int mk_query_gid(const mk_lib *lib, uintptr_t ctx, uint8_t port, int index, uint8_t gid[16]);

int mk_alloc_pd(const mk_lib *lib, uintptr_t ctx, uintptr_t *pd);
int mk_dealloc_pd(const mk_lib *lib, uintptr_t pd);

typedef struct {
	uintptr_t mr;
	uint32_t lkey;
	uint32_t rkey;
} mk_mr;

// mk_reg_mr uses ibv_reg_mr_iova2 when access holds optional flags (relaxed
// ordering) and the library has it, else ibv_reg_mr without them.
int mk_reg_mr(const mk_lib *lib, uintptr_t pd, uint64_t addr, uint64_t len, int access, mk_mr *out);
int mk_reg_dmabuf_mr(const mk_lib *lib, uintptr_t pd, uint64_t offset, uint64_t len, uint64_t iova, int fd,
                     int access, mk_mr *out);
int mk_dereg_mr(const mk_lib *lib, uintptr_t mr);

int mk_create_cq(const mk_lib *lib, uintptr_t ctx, int cqe, uintptr_t *cq, int *actual);
int mk_destroy_cq(const mk_lib *lib, uintptr_t cq);

enum {
	MK_QP_RC = 0,  // ibv_create_qp, IBV_QPT_RC
	MK_QP_SRD = 1, // efadv_create_qp_ex, IBV_QPT_DRIVER + EFADV_QP_DRIVER_TYPE_SRD
};

typedef struct {
	int32_t kind; // MK_QP_*
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
	uint64_t send_ops_flags; // SRD: IBV_QP_EX_WITH_* the QP must support
	uint16_t efa_flags;      // SRD: efadv_qp_init_attr.flags (rdma-core >= 52)
	uint8_t efa_sl;          // SRD: efadv_qp_init_attr.sl
} mk_qp_init;

typedef struct {
	uintptr_t qp;
	uintptr_t qpx; // the ibv_qp_ex of an SRD QP; 0 for RC
	uint32_t qpn;
	uint32_t max_send_wr; // what the provider granted
	uint32_t max_recv_wr;
	uint32_t max_inline_data;
} mk_qp;

int mk_create_qp(const mk_lib *lib, uintptr_t pd, uintptr_t send_cq, uintptr_t recv_cq, const mk_qp_init *in,
                 mk_qp *out);
int mk_destroy_qp(const mk_lib *lib, uintptr_t qp);

// mk_ah_attr is struct ibv_ah_attr flattened.
typedef struct {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint16_t dlid;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t is_global;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t port_num;
	uint8_t static_rate;
} mk_ah_attr;

// mk_qp_attr is the part of struct ibv_qp_attr the RC and SRD state
// machines set; attr_mask says which fields count (IBV_QP_* bits).
typedef struct {
	mk_ah_attr ah;
	uint32_t qp_state;
	uint32_t path_mtu;
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	uint32_t qp_access_flags;
	uint16_t pkey_index;
	uint8_t port_num;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer;
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
} mk_qp_attr;

int mk_modify_qp(const mk_lib *lib, uintptr_t qp, const mk_qp_attr *attr, int attr_mask);

int mk_create_ah(const mk_lib *lib, uintptr_t pd, const mk_ah_attr *attr, uintptr_t *ah);
int mk_destroy_ah(const mk_lib *lib, uintptr_t ah);

// mk_send_wr is one send work request with at most one gather entry. Go's
// SendWR has the same layout (checked at compile time on the Go side).
typedef struct {
	uint64_t wr_id;
	uint64_t local_addr;  // unused when flags has IBV_SEND_INLINE and length is 8: inline_value is sent
	uint64_t remote_addr;
	uint64_t inline_value;
	uintptr_t ah;         // SRD: the peer's address handle
	uint32_t length;      // 0: no gather entry
	uint32_t lkey;
	uint32_t rkey;
	uint32_t imm;         // host order
	uint32_t opcode;      // IBV_WR_*
	uint32_t flags;       // IBV_SEND_*
	uint32_t remote_qpn;  // SRD
	uint32_t remote_qkey; // SRD
} mk_send_wr;

// mk_recv_wr is one receive work request with at most one scatter entry.
typedef struct {
	uint64_t wr_id;
	uint64_t addr;
	uint32_t length; // 0: no scatter entry
	uint32_t lkey;
} mk_recv_wr;

// mk_wc is struct ibv_wc with the immediate in host order.
typedef struct {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t vendor_err;
	uint32_t byte_len;
	uint32_t imm; // host order; valid when wc_flags has IBV_WC_WITH_IMM
	uint32_t qp_num;
	uint32_t src_qp;
	uint32_t wc_flags;
	uint16_t slid;
	uint8_t sl;
	uint8_t pad[5];
} mk_wc;

// The data path. These call the provider's function pointers (ctx->ops,
// ibv_qp_ex->wr_*) exactly as verbs.h's static inline wrappers do; they take
// no lock, allocate nothing and never call back into Go.
//
// mk_post_send posts n WRs as linked lists of up to MK_POST_CHUNK entries and
// sets *posted to how many the provider took before an error.
int mk_post_send(uintptr_t qp, const mk_send_wr *wrs, int n, int *posted);
// mk_post_send_ex posts n WRs to an SRD QP in one ibv_wr_start/complete
// batch: all or none.
int mk_post_send_ex(uintptr_t qpx, const mk_send_wr *wrs, int n);
int mk_post_recv(uintptr_t qp, const mk_recv_wr *wrs, int n, int *posted);
// mk_poll_cq returns the number of completions written to out (at most n) or
// a negative value on error.
int mk_poll_cq(uintptr_t cq, mk_wc *out, int n);

enum { MK_POST_CHUNK = 32 };

typedef struct {
	uint32_t max_sq_wr;
	uint32_t max_rq_wr;
	uint16_t max_sq_sge;
	uint16_t max_rq_sge;
	uint16_t inline_buf_size;
	uint32_t device_caps; // EFADV_DEVICE_ATTR_CAPS_*
	uint32_t max_rdma_size;
} mk_efa_attr;

int mk_efa_query_device(const mk_lib *lib, uintptr_t ctx, mk_efa_attr *out);

// Verbs ABI values used by Go (checked against the headers in shim.c).
#define MK_IBV_QPS_RESET 0
#define MK_IBV_QPS_INIT 1
#define MK_IBV_QPS_RTR 2
#define MK_IBV_QPS_RTS 3
#define MK_IBV_QPS_ERR 6

#define MK_IBV_QP_STATE (1 << 0)
#define MK_IBV_QP_ACCESS_FLAGS (1 << 3)
#define MK_IBV_QP_PKEY_INDEX (1 << 4)
#define MK_IBV_QP_PORT (1 << 5)
#define MK_IBV_QP_QKEY (1 << 6)
#define MK_IBV_QP_AV (1 << 7)
#define MK_IBV_QP_PATH_MTU (1 << 8)
#define MK_IBV_QP_TIMEOUT (1 << 9)
#define MK_IBV_QP_RETRY_CNT (1 << 10)
#define MK_IBV_QP_RNR_RETRY (1 << 11)
#define MK_IBV_QP_RQ_PSN (1 << 12)
#define MK_IBV_QP_MAX_QP_RD_ATOMIC (1 << 13)
#define MK_IBV_QP_MIN_RNR_TIMER (1 << 15)
#define MK_IBV_QP_SQ_PSN (1 << 16)
#define MK_IBV_QP_MAX_DEST_RD_ATOMIC (1 << 17)
#define MK_IBV_QP_DEST_QPN (1 << 20)

#define MK_IBV_ACCESS_LOCAL_WRITE 1
#define MK_IBV_ACCESS_REMOTE_WRITE 2
#define MK_IBV_ACCESS_REMOTE_READ 4
#define MK_IBV_ACCESS_RELAXED_ORDERING (1 << 20)

#define MK_IBV_WR_RDMA_WRITE 0
#define MK_IBV_WR_RDMA_WRITE_WITH_IMM 1
#define MK_IBV_WR_SEND 2
#define MK_IBV_WR_SEND_WITH_IMM 3
#define MK_IBV_WR_RDMA_READ 4

#define MK_IBV_SEND_FENCE 1
#define MK_IBV_SEND_SIGNALED 2
#define MK_IBV_SEND_SOLICITED 4
#define MK_IBV_SEND_INLINE 8

#define MK_IBV_WC_WITH_IMM 2

#define MK_IBV_WC_SEND 0
#define MK_IBV_WC_RDMA_WRITE 1
#define MK_IBV_WC_RDMA_READ 2
#define MK_IBV_WC_RECV 128
#define MK_IBV_WC_RECV_RDMA_WITH_IMM 129

#define MK_IBV_QP_EX_WITH_RDMA_WRITE 1
#define MK_IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM 2
#define MK_IBV_QP_EX_WITH_SEND 4
#define MK_IBV_QP_EX_WITH_SEND_WITH_IMM 8
#define MK_IBV_QP_EX_WITH_RDMA_READ 16

#define MK_IBV_LINK_LAYER_UNSPECIFIED 0
#define MK_IBV_LINK_LAYER_INFINIBAND 1
#define MK_IBV_LINK_LAYER_ETHERNET 2

#define MK_GID_TYPE_IB 0
#define MK_GID_TYPE_ROCE_V1 1
#define MK_GID_TYPE_ROCE_V2 2

#define MK_IBV_PORT_ACTIVE 4

// efadv values; the ones newer than some installed efadv.h are fixed here
// (rdma-core 46 added RDMA_WRITE, 52 UNSOLICITED_WRITE_RECV).
#define MK_EFADV_CAPS_RDMA_READ (1 << 0)
#define MK_EFADV_CAPS_RNR_RETRY (1 << 1)
#define MK_EFADV_CAPS_CQ_WITH_SGID (1 << 2)
#define MK_EFADV_CAPS_RDMA_WRITE (1 << 3)
#define MK_EFADV_CAPS_UNSOLICITED_WRITE_RECV (1 << 4)

#endif // MK_VERBS_SHIM_H
