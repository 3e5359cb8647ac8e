package mongoidem

import (
	"context"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// defaultMaxDocument is MongoDB's document size limit (16 MiB), used until
// the server says otherwise.
const defaultMaxDocument = 16 << 20

// clockRefresh is how long a measured offset of the server's clock is
// used before it is measured again.
const clockRefresh = 10 * time.Minute

// ttlMargin is added to every ttl_at: the server's TTL monitor runs once a
// minute anyway, and the margin covers the error of the clock offset (a
// round trip) many times over.
const ttlMargin = time.Minute

// serverClock knows how far the server's clock is from this process's, from
// the localTime of a hello reply, and the server's document size limit.
type serverClock struct {
	db *mongo.Database

	mu         sync.Mutex
	offset     time.Duration // server clock - process clock
	measured   time.Time     // when offset was measured (process clock); zero: never
	refreshing bool
	maxDoc     int
}

// hello is the part of the hello reply the store reads.
type hello struct {
	LocalTime         time.Time `bson:"localTime"`
	MaxBsonObjectSize int       `bson:"maxBsonObjectSize"`
	SetName           string    `bson:"setName"`
	Msg               string    `bson:"msg"`
}

func (c *serverClock) measure(ctx context.Context) error {
	start := time.Now()
	var h hello
	if err := c.db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&h); err != nil {
		return err
	}
	end := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !h.LocalTime.IsZero() {
		// The server read its clock somewhere in the round trip: take the
		// middle. The error is at most half the round trip.
		c.offset = h.LocalTime.Sub(start.Add(end.Sub(start) / 2))
	}
	c.measured = end
	if h.MaxBsonObjectSize > 0 {
		c.maxDoc = h.MaxBsonObjectSize
	}
	return nil
}

// ttlAt is the server-clock time at which a record whose retention ends at
// until, by a request made at now (the caller's clock), may be deleted by
// the TTL index: the duration until - now from the server's now, plus
// ttlMargin. The caller's clock only gives the duration, so a caller whose
// clock is hours off the server's never has its records deleted early.
func (c *serverClock) ttlAt(ctx context.Context, now, until time.Time) (time.Time, error) {
	c.mu.Lock()
	measured, offset := c.measured, c.offset
	stale := measured.IsZero() || time.Since(measured) > clockRefresh
	refresh := stale && !c.refreshing && !measured.IsZero()
	if refresh {
		c.refreshing = true
	}
	c.mu.Unlock()
	switch {
	case measured.IsZero():
		// First use: measure now; concurrent first uses each measure.
		if err := c.measure(ctx); err != nil {
			return time.Time{}, err
		}
		c.mu.Lock()
		offset = c.offset
		c.mu.Unlock()
	case refresh:
		// One caller refreshes; the others use the old offset meanwhile.
		err := c.measure(ctx)
		c.mu.Lock()
		c.refreshing = false
		offset = c.offset
		c.mu.Unlock()
		_ = err // the old offset is still good to well within ttlMargin
	}
	t := ms(time.Now().Add(offset + until.Sub(now) + ttlMargin))
	return t, nil
}

// maxDocument is the server's document size limit as last measured.
func (c *serverClock) maxDocument() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxDoc > 0 {
		return c.maxDoc
	}
	return defaultMaxDocument
}
