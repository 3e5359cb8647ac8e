package job_test

import (
	"testing"
	"time"

	"github.com/idemgo/idem/job"
)

func TestWindows(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no tz database:", err)
	}
	cases := []struct {
		name  string
		s     job.Schedule
		tick  time.Time
		id    string
		hours float64
	}{
		{"hourly", job.Every(time.Hour), time.Date(2030, 1, 2, 15, 59, 59, 999e6, time.UTC),
			"2030-01-02T15:00:00Z/2030-01-02T16:00:00Z", 1},
		{"hourly, other zone", job.Every(time.Hour), time.Date(2030, 1, 2, 10, 30, 0, 0, ny),
			"2030-01-02T15:00:00Z/2030-01-02T16:00:00Z", 1},
		{"15 minutes", job.Every(15 * time.Minute), time.Date(2030, 1, 2, 15, 44, 0, 0, time.UTC),
			"2030-01-02T15:30:00Z/2030-01-02T15:45:00Z", 0.25},
		{"weekly from Monday", job.Every(7 * 24 * time.Hour), time.Date(2030, 1, 3, 12, 0, 0, 0, time.UTC), // a Thursday
			"2029-12-31T00:00:00Z/2030-01-07T00:00:00Z", 168},
		{"daily UTC", job.Daily(nil), time.Date(2030, 1, 2, 23, 59, 0, 0, time.UTC),
			"2030-01-02T00:00:00Z/2030-01-03T00:00:00Z", 24},
		{"daily New York", job.Daily(ny), time.Date(2030, 1, 3, 2, 0, 0, 0, time.UTC), // 21:00 on the 2nd there
			"2030-01-02T05:00:00Z/2030-01-03T05:00:00Z", 24},
		{"spring forward", job.Daily(ny), time.Date(2030, 3, 10, 12, 0, 0, 0, ny),
			"2030-03-10T05:00:00Z/2030-03-11T04:00:00Z", 23},
		{"monthly", job.Monthly(nil), time.Date(2030, 2, 28, 23, 0, 0, 0, time.UTC),
			"2030-02-01T00:00:00Z/2030-03-01T00:00:00Z", 28 * 24},
		{"cron tick", job.Tick(), time.Date(2030, 1, 2, 15, 0, 0, 3e6, time.UTC),
			"2030-01-02T15:00:00Z", 0},
	}
	for _, c := range cases {
		w := c.s.Window(c.tick)
		if w.ID() != c.id {
			t.Errorf("%s: %s, want %s", c.name, w.ID(), c.id)
		}
		if !w.End.IsZero() && (w.End.Sub(w.Start).Hours() != c.hours || !w.Contains(c.tick)) {
			t.Errorf("%s: %v long, contains tick %v", c.name, w.End.Sub(w.Start), w.Contains(c.tick))
		}
	}
	w := job.Every(time.Hour).Window(time.Date(2030, 1, 2, 15, 0, 0, 0, time.UTC))
	if w.Contains(w.End) || !w.Contains(w.Start) {
		t.Error("windows are half-open: [Start, End)")
	}
}

func TestEveryPanicsOnZero(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Every(0) did not panic")
		}
	}()
	job.Every(0)
}
