//go:build !linux

package redisidem_test

import (
	"errors"
	"os"
	"syscall"
)

// childProcAttr: no parent-death signal outside Linux; the test's cleanup
// stops its servers.
func childProcAttr() *syscall.SysProcAttr { return nil }

var errNoPause = errors.New("pausing a process is implemented on Linux only")

func pause(*os.Process) error  { return errNoPause }
func resume(*os.Process) error { return errNoPause }
