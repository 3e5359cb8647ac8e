package testenv

import (
	"net"
	"testing"
)

// FreePorts returns n distinct loopback ports that were free a moment ago,
// for the servers a test starts on private ports. Each is held until all
// are chosen, so none repeats.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
