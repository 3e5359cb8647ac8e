package redisidem_test

import (
	"os"
	"syscall"
)

// childProcAttr makes the kernel kill a server the test started if the test
// process dies without its cleanup (a crash, a timeout's SIGQUIT).
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }

// pause stops a process (SIGSTOP) until resume (SIGCONT).
func pause(p *os.Process) error  { return p.Signal(syscall.SIGSTOP) }
func resume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }
