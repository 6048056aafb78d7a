//go:build !linux

package bench

import "syscall"

// procAttr puts a child in its own process group (Pdeathsig is Linux's).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
