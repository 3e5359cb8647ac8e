package outboxpostgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem/outbox"
)

// Fetch implements outbox.Store with one statement: the pending records in
// Seq order through the partial index of pending rows, without those
// behind a parked or backing-off record of their key.
//
// The statement runs with bitmap scans and sorts off (SET LOCAL, in one
// round trip with it): the planner must walk the pending index in Seq
// order and stop at the Limit. A table whose statistics lag behind a burst
// (they say a few hundred pending rows when there are a million) otherwise
// gets a plan that reads every pending row and sorts them, on every fetch.
func (s *Store) Fetch(ctx context.Context, req outbox.FetchRequest) ([]outbox.Record, error) {
	if req.Limit <= 0 {
		return nil, ctx.Err()
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN READ ONLY")
	b.Queue("SET LOCAL enable_bitmapscan = off")
	b.Queue("SET LOCAL enable_sort = off")
	var recs []outbox.Record
	exclude := req.Exclude
	if exclude == nil {
		exclude = []int64{}
	}
	b.Queue(s.sql.fetch, micro(req.Now), req.Limit, exclude).Query(func(rows pgx.Rows) error {
		var err error
		recs, err = scanRecords(rows, req.Limit)
		return err
	})
	b.Queue("COMMIT")
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, wrapErr("fetch", err)
	}
	return recs, nil
}

func scanRecords(rows pgx.Rows, capacity int) ([]outbox.Record, error) {
	defer rows.Close()
	out := make([]outbox.Record, 0, min(capacity, 1024))
	for rows.Next() {
		var (
			r                    outbox.Record
			headers              string
			published, notBefore *time.Time
		)
		if err := rows.Scan(&r.Seq, &r.ID, &r.Destination, &r.RoutingKey, &r.OrderingKey, &headers, &r.Payload,
			&r.Fingerprint, &r.CreatedAt, &r.NextAttemptAt, &r.Attempts, &r.LastError, &r.Parked, &published, &notBefore); err != nil {
			return nil, err
		}
		h, err := outbox.DecodeHeaders(headers)
		if err != nil {
			return nil, err
		}
		r.Headers = h
		r.CreatedAt, r.NextAttemptAt = r.CreatedAt.UTC(), r.NextAttemptAt.UTC()
		if published != nil {
			r.PublishedAt = published.UTC()
		}
		if notBefore != nil {
			r.NotBefore = notBefore.UTC()
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// MarkPublished implements outbox.Store with one UPDATE.
func (s *Store) MarkPublished(ctx context.Context, seqs []int64, now time.Time) error {
	if len(seqs) == 0 {
		return ctx.Err()
	}
	if _, err := s.pool.Exec(ctx, s.sql.markPublished, micro(now), seqs); err != nil {
		return wrapErr("mark published", err)
	}
	return nil
}

// MarkFailed implements outbox.Store with one UPDATE.
func (s *Store) MarkFailed(ctx context.Context, fs []outbox.Failure) error {
	if len(fs) == 0 {
		return ctx.Err()
	}
	var (
		seqs     = make([]int64, len(fs))
		attempts = make([]int32, len(fs))
		next     = make([]time.Time, len(fs))
		msgs     = make([]string, len(fs))
		park     = make([]bool, len(fs))
	)
	for i, f := range fs {
		seqs[i], attempts[i], next[i], msgs[i], park[i] = f.Seq, int32(f.Attempts), micro(f.NextAttemptAt), f.Error, f.Park
	}
	if _, err := s.pool.Exec(ctx, s.sql.markFailed, seqs, attempts, next, msgs, park); err != nil {
		return wrapErr("mark failed", err)
	}
	return nil
}

// Lease implements outbox.Store with one upsert on the lease table.
func (s *Store) Lease(ctx context.Context, req outbox.LeaseRequest) (outbox.Lease, error) {
	var l outbox.Lease
	err := s.pool.QueryRow(ctx, s.sql.lease, req.Owner, req.Token, micro(req.Now), micro(req.Until)).Scan(&l.Owner, &l.Token, &l.Until)
	if errors.Is(err, pgx.ErrNoRows) {
		// The row was inserted by another relay after this statement's
		// snapshot: not ours this time.
		return outbox.Lease{}, nil
	}
	if err != nil {
		return outbox.Lease{}, wrapErr("lease", err)
	}
	l.Until = l.Until.UTC()
	return l, nil
}

// ReleaseLease implements outbox.Store.
func (s *Store) ReleaseLease(ctx context.Context, req outbox.LeaseRequest) error {
	if _, err := s.pool.Exec(ctx, s.sql.release, req.Owner, req.Token); err != nil {
		return wrapErr("release lease", err)
	}
	return nil
}

// Cleanup implements outbox.Store: one DELETE of the oldest published rows
// found through the published_at index.
func (s *Store) Cleanup(ctx context.Context, req outbox.CleanupRequest) (int, error) {
	if req.Limit <= 0 {
		return 0, ctx.Err()
	}
	tag, err := s.pool.Exec(ctx, s.sql.cleanup, micro(req.Before), req.Limit)
	if err != nil {
		return 0, wrapErr("cleanup", err)
	}
	return int(tag.RowsAffected()), nil
}
