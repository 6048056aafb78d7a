//go:build !linux

package store

import "os"

// allocate grows f to n bytes (sparse; a full disk shows up on write).
func allocate(f *os.File, _, n int64) error { return f.Truncate(n) }
