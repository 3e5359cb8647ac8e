//go:build !race

package integration_test

const raceDetector = false
