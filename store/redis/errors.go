package redisidem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
)

// wrap labels a Redis failure with the operation and classifies it. A reply
// Redis gives because of the data (see isDataError) is an
// *idem.InvalidDataError: permanent, dead-lettered, never retried, since the
// same message would fail the same way for ever. Everything else
// (connection loss, timeouts, OOM, LOADING, READONLY, BUSY, cluster
// redirections) stays a plain error the Guard retries. Either way the error
// stays inspectable (errors.Is(err, context.Canceled), redis.Error,
// net.Error).
func wrap(op string, err error) error {
	if strings.Contains(err.Error(), "syntax error") {
		// SET with NX and GET together is Redis 7.0+.
		return fmt.Errorf("redisidem: %s (Redis 7.0 or later is required): %w", op, err)
	}
	err = fmt.Errorf("redisidem: %s: %w", op, err)
	if isDataError(err) {
		return &idem.InvalidDataError{Op: op, Err: err}
	}
	return err
}

// fail is wrap for the Store's operations. On a cluster client it also
// asks for a fresh slot map after any failure that is not the data's:
// go-redis reloads its map on MOVED replies and on a timer
// (ClusterOptions.ClusterStateReloadInterval, 60 s by default), not when a
// master stops answering, so without this a store kept sending the dead
// master's slots to its address for up to a minute after its replica had
// taken over (TestClusterFailover). The reload is asynchronous and
// coalesced (at most one per 200 ms) and costs one CLUSTER SLOTS to a live
// node.
func (s *Store) fail(op string, err error) error {
	err = wrap(op, err)
	if c, ok := s.client.(*goredis.ClusterClient); ok && !errors.Is(err, idem.ErrInvalidData) {
		c.ReloadState(context.Background())
	}
	return err
}

// isDataError reports whether err is Redis's (or the record decoder's)
// refusal of the data rather than a failure of the server or the network:
//
//   - a script's own refusal ("idem: ..."): a value at the key that is not
//     a record, a token too large to count on;
//   - WRONGTYPE: the key holds a value of another type (not a record);
//   - a Lua runtime error in a script ("ERR user_script:..."), which only
//     input the script did not expect can cause;
//   - a number Redis cannot take (an expiry out of range);
//   - a stored value the decoder cannot read (errMalformed).
//
// Errors Redis raises inside a script for its own state (OOM, READONLY,
// BUSY, ...) keep their own prefix in Redis 7 and are not matched.
func isDataError(err error) bool {
	if errors.Is(err, errMalformed) {
		return true
	}
	var re goredis.Error
	if !errors.As(err, &re) || errors.Is(err, goredis.Nil) {
		return false
	}
	msg := re.Error()
	switch {
	case strings.HasPrefix(msg, "idem: "), strings.HasPrefix(msg, "WRONGTYPE "):
		return true
	case strings.HasPrefix(msg, "ERR "):
		return strings.HasPrefix(msg, "ERR user_script:") ||
			strings.Contains(msg, "invalid expire time") ||
			strings.Contains(msg, "value is not an integer or out of range")
	}
	return false
}

// Scripts count in doubles, exact to 2^53: times (unix ms) and tokens
// beyond that are refused before they reach Redis.
const maxExact = 1<<53 - 1

var (
	minTime = time.UnixMilli(-maxExact)
	maxTime = time.UnixMilli(maxExact)
)

// invalid is a request the store refuses: permanent.
func invalid(op, format string, args ...any) error {
	return &idem.InvalidDataError{Op: op, Err: fmt.Errorf("redisidem: "+format, args...)}
}

// checkTimes refuses times the scripts cannot count exactly (beyond about
// 285,000 years from 1970, where unix milliseconds pass 2^53).
func checkTimes(op string, times ...time.Time) error {
	for _, t := range times {
		if t.Before(minTime) || t.After(maxTime) {
			return invalid(op, "time %v out of range (unix milliseconds beyond ±2^53)", t)
		}
	}
	return nil
}

// checkClaim refuses a Prepare'd claim request whose times or fresh token
// the scripts cannot count exactly. Tokens Prepare draws are below 2^52.
func checkClaim(op string, req idem.ClaimRequest) error {
	if req.NewToken < 1 || req.NewToken >= maxExact {
		return invalid(op, "NewToken %d out of range [1, 2^53)", req.NewToken)
	}
	return checkTimes(op, req.Now, req.LeaseUntil, req.ExpiresAt)
}
