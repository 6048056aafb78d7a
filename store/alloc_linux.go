package store

import (
	"errors"
	"os"
	"syscall"
)

// allocate grows f from size cur to size n, reserving the blocks with
// fallocate where the file system supports it so a full disk is reported now.
func allocate(f *os.File, cur, n int64) error {
	if n > cur {
		err := syscall.Fallocate(int(f.Fd()), 0, cur, n-cur)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EOPNOTSUPP) && !errors.Is(err, syscall.ENOSYS) {
			return err
		}
	}
	return f.Truncate(n)
}
