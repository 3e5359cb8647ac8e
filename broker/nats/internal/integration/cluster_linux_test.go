//go:build linux

package integration_test

import (
	"os/exec"
	"syscall"
)

// dieWithTest has cmd's process killed when the test process dies (a
// -timeout panic, a kill), so that no server outlives the test.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
