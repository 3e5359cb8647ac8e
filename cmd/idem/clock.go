package main

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// storeClock reads the store server's clock, the fleet's one shared
// reference: two hosts whose clocks are each within S of it are within 2S
// of each other. ok is false when the store has no server clock to read
// (memory, SQLite: the host's own) or idem does not read it (MongoDB).
func storeClock(ctx context.Context, h *dsn.Handle) (server time.Time, ok bool, err error) {
	switch {
	case h.PG != nil:
		err = h.PG.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&server)
		return server, true, err
	case h.Redis != nil:
		server, err = h.Redis.Time(ctx).Result()
		return server, true, err
	case h.SQL != nil && h.Scheme == "mysql":
		var s string
		if err = h.SQL.QueryRowContext(ctx, "SELECT CAST(UTC_TIMESTAMP(6) AS CHAR)").Scan(&s); err != nil {
			return server, true, err
		}
		server, err = time.Parse("2006-01-02 15:04:05.999999", s)
		return server, true, err
	}
	return server, false, nil
}

// clockFinding compares the host's clock (now) with the store server's,
// within half the round trip: past half the lease's renewal margin
// (Lease/3, so Lease/6), two hosts off in opposite directions can see a
// live lease as ended.
func clockFinding(ctx context.Context, h *dsn.Handle, now func() time.Time, lease time.Duration) (finding, error) {
	t0 := now()
	server, ok, err := storeClock(ctx, h)
	t1 := now()
	if !ok {
		return finding{Check: "clock", Level: levelNote, Message: fmt.Sprintf("the %s store has no server clock to compare this host's with", h.Scheme)}, nil
	}
	if err != nil {
		return finding{}, fmt.Errorf("read the store's clock: %w", err)
	}
	rtt := t1.Sub(t0)
	skew := server.Sub(t0.Add(rtt / 2))
	off := skew.Abs() - rtt/2 // the least the clocks differ by
	bound := lease / 6
	msg := fmt.Sprintf("this host's clock is %v %s the store server's (±%v)", skew.Abs().Round(time.Millisecond), map[bool]string{true: "behind", false: "ahead of"}[skew > 0],
		(rtt / 2).Round(time.Microsecond))
	if off > bound {
		return finding{Check: "clock", Level: levelTrap,
			Message: msg + fmt.Sprintf(", over Lease/6 = %v (half the renewal margin of a %v lease): two hosts off in opposite directions see a live lease as ended and retake it", bound, lease),
			Fix:     "run NTP (chrony, systemd-timesyncd) on every host of the fleet, or raise the guard's Lease (--lease tells the doctor yours)"}, nil
	}
	return finding{Check: "clock", Level: levelOK, Message: msg + fmt.Sprintf(", under Lease/6 = %v", bound)}, nil
}
