package bench

import "syscall"

// procAttr puts a child in its own process group and has the kernel kill
// it should the harness die, so no peer outlives an interrupted run.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
