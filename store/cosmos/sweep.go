package cosmos

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
)

// The sweep lock: an item of its own logical partition, which one sweeping
// instance creates and deletes when done. Its holder's time runs out after
// sweepLockFor (by the callers' clock, and by its own time to live).
const (
	lockPartition = "locks"
	sweepLockID   = "sweep"
	sweepLockFor  = time.Minute
)

type lockDoc struct {
	ID    string `json:"id"`
	PK    string `json:"pk"`
	Until num    `json:"until"`
	TTL   num    `json:"ttl"`
}

// Sweep implements idem.Store. Settled records expire by themselves (their
// time to live); Sweep deletes those whose retention ended by the caller's
// clock before the server's countdown ran out, and those of a container
// without a default time to live. Under the sweep lock (elsewhere it
// returns 0), one query across partitions finds at most req.Limit records
// that are completed or released with ExpiresAt <= Now, and each is
// deleted only if it is still as read (If-Match): a record claimed again
// meanwhile stays.
func (s *Store) Sweep(ctx context.Context, req idem.SweepRequest) (int, error) {
	if req.Limit <= 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	unlock, ok, err := s.lockSweep(ctx, req.Now)
	if err != nil || !ok {
		return 0, wrap("sweep", err)
	}
	defer unlock()
	type victim struct {
		ID   string      `json:"id"`
		PK   string      `json:"pk"`
		ETag azcore.ETag `json:"_etag"`
	}
	var victims []victim
	q := "SELECT c.id, c.pk, c._etag FROM c WHERE " + isRecord + " AND c.state != @inProgress AND c.exp <= @now"
	params := []azcosmos.QueryParameter{{Name: "@inProgress", Value: string(idem.StateInProgress)}, {Name: "@now", Value: ms(req.Now)}}
	err = s.query(ctx, q, "", params, int32(req.Limit), func(b []byte) (bool, error) {
		var v victim
		if err := json.Unmarshal(b, &v); err != nil {
			return false, err
		}
		victims = append(victims, v)
		return len(victims) < req.Limit, nil
	})
	if err != nil {
		return 0, wrap("sweep", err)
	}
	n := 0
	for _, v := range victims {
		_, err := s.coll.DeleteItem(ctx, azcosmos.NewPartitionKeyString(v.PK), v.ID, &azcosmos.ItemOptions{IfMatchEtag: &v.ETag})
		switch statusOf(err) {
		case 0:
			if err != nil {
				return n, wrap("sweep", err)
			}
			n++
		case http.StatusNotFound, http.StatusPreconditionFailed:
			// Gone (expired) or claimed again since the query: not ours.
		default:
			return n, wrap("sweep", err)
		}
	}
	return n, nil
}

// lockSweep takes the sweep lock: ok is false when another instance holds
// it. unlock deletes it (only if it is still this holder's).
func (s *Store) lockSweep(ctx context.Context, now time.Time) (unlock func(), ok bool, err error) {
	pk := azcosmos.NewPartitionKeyString(lockPartition)
	body, err := json.Marshal(lockDoc{ID: sweepLockID, PK: lockPartition, Until: ms(now.Add(sweepLockFor)), TTL: num(sweepLockFor / time.Second)})
	if err != nil {
		return nil, false, err
	}
	held := func(etag azcore.ETag) func() {
		return func() {
			// Deleted even when the sweep's context is done: left, it
			// would hold the sweeps of every instance until it runs out.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_, _ = s.coll.DeleteItem(ctx, pk, sweepLockID, &azcosmos.ItemOptions{IfMatchEtag: &etag})
		}
	}
	resp, err := s.coll.CreateItem(ctx, pk, body, nil)
	if err == nil {
		return held(resp.ETag), true, nil
	}
	if statusOf(err) != http.StatusConflict {
		return nil, false, err
	}
	// Held: taken over only when its holder's time ran out.
	cur, err := s.coll.ReadItem(ctx, pk, sweepLockID, nil)
	if statusOf(err) == http.StatusNotFound {
		return nil, false, nil // released meanwhile: the next sweep takes it
	}
	if err != nil {
		return nil, false, err
	}
	var l lockDoc
	if err := json.Unmarshal(cur.Value, &l); err != nil {
		return nil, false, err
	}
	if now.Before(fromMS(l.Until)) {
		return nil, false, nil
	}
	rep, err := s.coll.ReplaceItem(ctx, pk, sweepLockID, body, &azcosmos.ItemOptions{IfMatchEtag: &cur.ETag})
	switch statusOf(err) {
	case 0:
		if err != nil {
			return nil, false, err
		}
		return held(rep.ETag), true, nil
	case http.StatusPreconditionFailed, http.StatusNotFound:
		return nil, false, nil
	}
	return nil, false, err
}
