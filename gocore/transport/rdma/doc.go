// Package rdma is the home of what the two verbs backends, ibverbs (RC queue
// pairs) and efa (SRD), share; it has no code of its own. Its subpackages
// each do one job:
//
//	connblob  the sealed connection blob: header, HMAC, size and region checks
//	memreg    registered memory: the region table, scratch buffers, op bounds
//	session   an endpoint's life: Connect's checks, the handshake wait, Close
//
// What differs on purpose between RC and SRD (queue pairs, signalling,
// completion accounting, the blob's own fields) stays in the backends.
package rdma
