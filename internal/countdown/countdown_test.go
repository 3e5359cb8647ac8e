package countdown

import "testing"

func TestCountdown(t *testing.T) {
	var c Countdown
	if c.Active() {
		t.Fatal("active before Start")
	}
	c.Start(3)
	for i := range 3 {
		if !c.Active() {
			t.Fatalf("call %d after Start(3): inactive", i)
		}
	}
	if c.Active() {
		t.Fatal("a fourth call after Start(3) still active")
	}
	c.Start(1)
	c.Start(2) // a new event starts the count again
	if !c.Active() || !c.Active() || c.Active() {
		t.Fatal("Start(2) after Start(1) did not give exactly two active calls")
	}
}
