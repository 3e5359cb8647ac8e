//go:build !unix

package testenv

import "time"

// ProcessCPU is not measured here: benchmarks report wall time only.
func ProcessCPU() (time.Duration, bool) { return 0, false }
