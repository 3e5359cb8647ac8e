//go:build unix

package idemhttp_test

import (
	"syscall"
	"time"
)

// cpuTime is the process's user and system CPU time. On a shared, loaded
// machine CPU time per operation is steadier than wall time, which counts
// the time spent waiting for a core.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
