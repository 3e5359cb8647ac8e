package dlq

import (
	"errors"
	"testing"
	"time"
)

func TestISODuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"PT1M": time.Minute, "PT30S": 30 * time.Second, "P14D": 14 * 24 * time.Hour, "P1DT2H3M4.5S": 26*time.Hour + 3*time.Minute + 4500*time.Millisecond,
		"pt0.25s": 250 * time.Millisecond,
	} {
		if got, err := isoDuration(in); err != nil || got != want {
			t.Errorf("isoDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if got, err := isoDuration("P10675199DT2H48M5.4775807S"); err != nil || got < 10000*24*time.Hour {
		t.Errorf("Service Bus's largest TimeSpan: %v, %v", got, err)
	}
	for _, in := range []string{"", "P", "1M", "PT", "P1H", "PT1D", "PTxS", "P1DT"} {
		if _, err := isoDuration(in); !errors.Is(err, ErrNotReadable) {
			t.Errorf("isoDuration(%q): %v, want ErrNotReadable", in, err)
		}
	}
}

// The budget is MaxDeliveryCount lock durations; the largest TimeSpan is
// no TTL; a property left out is Service Bus's default.
func TestServiceBusSpans(t *testing.T) {
	lock, ttl, n := "PT5M", "P10675199DT2H48M5.4775807S", int32(8)
	spans, err := sbSpans("orders", sbProperties{LockDuration: &lock, DefaultMessageTimeToLive: &ttl, MaxDeliveryCount: &n})
	if err != nil || len(spans) != 2 || spans[0].Duration != 40*time.Minute || !spans[0].Budget || !spans[1].Unbounded {
		t.Fatalf("spans %+v, %v", spans, err)
	}
	ttl = "P14D"
	spans, err = sbSpans("orders", sbProperties{DefaultMessageTimeToLive: &ttl})
	if err != nil || spans[0].Duration != 10*time.Minute || spans[1].Duration != 14*24*time.Hour || spans[1].Unbounded {
		t.Fatalf("defaults: spans %+v, %v", spans, err)
	}
}
