//go:build unix

package testenv

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time the process has used (user and system, GC
// workers included), and whether it could be read. On a shared machine a
// benchmark's CPU per operation measures the code where its wall time
// measures the neighbours.
func ProcessCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
