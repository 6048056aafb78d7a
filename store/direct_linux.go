package store

import (
	"os"
	"syscall"
	"unsafe"
)

// directAlign is the alignment O_DIRECT needs of buffers, offsets and
// lengths: the page size covers every logical block size in use.
const directAlign = 4096

// openDirect opens path a second time with O_DIRECT, or returns nil where
// the file system refuses it (tmpfs, some network file systems).
//
// Whole pieces are written through it: a download is written once and not
// read back soon, so copying it through the page cache costs CPU and memory
// bandwidth (the single largest cost of a loopback download) for nothing,
// and leaves gigabytes of dirty pages for the final fsync to flush.
func openDirect(path string) *os.File {
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_DIRECT|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	return f
}

// directOK reports whether data at off can go through the O_DIRECT file.
func directOK(data []byte, off int64) bool {
	return len(data) > 0 && len(data)%directAlign == 0 && off%directAlign == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(data)))%directAlign == 0
}
