package dsn

import (
	"context"
	"fmt"
	"net/url"
	"sync"

	goredis "github.com/redis/go-redis/v9"

	redisidem "github.com/idemgo/idem/store/redis"
)

func init() { register("redis", openRedis) }

// quietRedis drops go-redis's internal log lines (dial retries printed to
// stderr): the commands report the failure once, with a hint.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

var silenceRedis sync.Once

// openRedis opens redis://[USER:PASS@]HOST:PORT[/DB][?prefix=P] (rediss://
// for TLS) plus any option go-redis reads from a URL.
func openRedis(_ context.Context, u *url.URL, raw string) (*Handle, error) {
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	u2 := *u
	u2.RawQuery = q.Encode()
	o, err := goredis.ParseURL(u2.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	silenceRedis.Do(func() { goredis.SetLogger(quietRedis{}) })
	c := goredis.NewClient(o)
	s, err := redisidem.New(c, redisidem.Options{Prefix: prefix})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrBadDSN, Redact(raw), err)
	}
	return &Handle{Store: s, Native: s, Redis: c, Close: c.Close, Where: "prefix " + s.Prefix(),
		ping: func(ctx context.Context) error { return c.Ping(ctx).Err() }}, nil
}
