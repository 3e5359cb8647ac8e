//go:build !linux

package redisstore_test

import "syscall"

// childProcAttr: no parent-death signal outside Linux; the test's cleanup
// stops its servers.
func childProcAttr() *syscall.SysProcAttr { return nil }
