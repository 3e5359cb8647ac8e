package job

import (
	"time"
)

// Window is the scheduled period one run of a job is for: the hour a report
// covers, the day a batch closes. It is the job's unit of "once": every
// trigger of the same job for the same window shares one record.
//
// Start is required. End is the start of the next window, or zero for a
// schedule whose ticks have no length (Tick).
type Window struct {
	Start time.Time
	End   time.Time
}

// ID is the window as the job's records name it: the start and end in UTC,
// RFC 3339, joined by "/" (an ISO 8601 interval), such as
// "2030-01-02T15:00:00Z/2030-01-02T16:00:00Z"; the start alone when End is
// zero. Both ends are part of it, so a job whose schedule changes from
// hourly to daily never mistakes its first daily window for the hourly one
// that starts at the same instant. The same instants give the same ID
// whatever the location of the times.
func (w Window) ID() string {
	id := w.Start.UTC().Format(time.RFC3339Nano)
	if !w.End.IsZero() {
		id += "/" + w.End.UTC().Format(time.RFC3339Nano)
	}
	return id
}

// String is ID.
func (w Window) String() string { return w.ID() }

// Contains reports whether t falls in the window: Start <= t < End (t equal
// to Start for a window without an end).
func (w Window) Contains(t time.Time) bool {
	if w.End.IsZero() {
		return t.Equal(w.Start)
	}
	return !t.Before(w.Start) && t.Before(w.End)
}

// Schedule maps a tick (the time a scheduler fired for) to the window that
// tick runs. Every instance of a job must use the same schedule.
type Schedule interface {
	Window(tick time.Time) Window
}

// ScheduleFunc adapts a function to Schedule (a fiscal calendar, windows
// with an offset).
type ScheduleFunc func(tick time.Time) Window

// Window calls f.
func (f ScheduleFunc) Window(tick time.Time) Window { return f(tick) }

// Every returns windows of length d aligned to the zero time in UTC: the
// tick is truncated to a multiple of d. Every(time.Hour) maps 15:00:00.004
// and 15:42 to the window 15:00-16:00; Every(24*time.Hour) starts at
// midnight UTC, Every(7*24*time.Hour) on Mondays. It panics if d is not
// positive, as time.NewTicker does.
func Every(d time.Duration) Schedule {
	if d <= 0 {
		panic("job: non-positive interval for Every")
	}
	return ScheduleFunc(func(tick time.Time) Window {
		start := tick.UTC().Truncate(d)
		return Window{Start: start, End: start.Add(d)}
	})
}

// Daily returns calendar days in loc (nil: UTC): midnight to midnight, 23 or
// 25 hours long on the days daylight saving time changes.
func Daily(loc *time.Location) Schedule {
	return calendar(loc, func(t time.Time) (time.Time, time.Time) {
		start := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, t.Location())
		return start, start.AddDate(0, 0, 1)
	})
}

// Monthly returns calendar months in loc (nil: UTC).
func Monthly(loc *time.Location) Schedule {
	return calendar(loc, func(t time.Time) (time.Time, time.Time) {
		start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, t.Location())
		return start, start.AddDate(0, 1, 0)
	})
}

func calendar(loc *time.Location, bounds func(time.Time) (time.Time, time.Time)) Schedule {
	if loc == nil {
		loc = time.UTC
	}
	return ScheduleFunc(func(tick time.Time) Window {
		start, end := bounds(tick.In(loc))
		return Window{Start: start, End: end}
	})
}

// Tick makes each tick its own window, truncated to the second: for cron
// expressions and other schedules that hand the scheduled time to the job.
// Pass the time the schedule fired for, which every instance agrees on,
// never the clock read when the run starts.
func Tick() Schedule {
	return ScheduleFunc(func(tick time.Time) Window {
		return Window{Start: tick.UTC().Truncate(time.Second)}
	})
}
