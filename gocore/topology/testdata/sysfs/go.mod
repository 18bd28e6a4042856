// This go.mod only fences the fake sysfs trees off from the
// github.com/mkernel/mkernel module: their file names contain ':' (PCI
// addresses), which module zips forbid, and the go command leaves nested
// modules out of the zip instead of failing on them. Nothing builds here.
module github.com/mkernel/mkernel/gocore/topology/testdata/sysfs

go 1.26.0
