// Package shm makes shared-memory segments that other processes of the same user can map:
// the memory behind loopback transports, the proxy's command FIFO in the one-box
// emulation, and the data ring handed to transport plugins.
//
// A segment is a memfd (memfd_create, sealed against shrinking) mapped MAP_SHARED. Other
// processes open it by its Path, /proc/<pid>/fd/<n>, while the creator lives; a mapping,
// once made, outlives the creator. Nothing is ever left behind in a file system: the
// memory is freed when the last mapping and descriptor are gone, also after a crash.
package shm
