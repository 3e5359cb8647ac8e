package mongoidem

import "testing"

func TestNonAtomicUpdates(t *testing.T) {
	for v, want := range map[string]bool{"": false, "v1.24.2": true, "1.0.0": true, "v2.0.0": false, "2.1.0-rc1": false, "garbled": true} {
		if got := nonAtomicUpdates(v); got != want {
			t.Errorf("nonAtomicUpdates(%q) = %v, want %v", v, got, want)
		}
	}
}
