package redisstore_test

import "syscall"

// childProcAttr makes the kernel kill a server the test started if the test
// process dies without its cleanup (a crash, a timeout's SIGQUIT).
func childProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
