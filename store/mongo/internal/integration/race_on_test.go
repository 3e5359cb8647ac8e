//go:build race

package integration_test

// raceDetector: this binary runs under the race detector.
const raceDetector = true
