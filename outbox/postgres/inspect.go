package outboxpostgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/idemgo/idem/outbox"
)

// Stats implements outbox.Inspector. Every count is exact: the pending and
// parked ones come from the pending rows' index, the published one from
// the published rows' index (on a very large outbox, that one takes a
// while).
func (s *Store) Stats(ctx context.Context, now time.Time) (outbox.Stats, error) {
	var (
		st     outbox.Stats
		oldest *time.Time
		owner  *string
		token  *int64
		until  *time.Time
	)
	err := s.pool.QueryRow(ctx, s.sql.stats).Scan(&st.Pending, &st.Parked, &st.Published, &oldest, &owner, &token, &until)
	if err != nil {
		return outbox.Stats{}, wrapErr("stats", err)
	}
	if oldest != nil {
		st.OldestPending = oldest.UTC()
	}
	if owner != nil {
		st.Lease = outbox.Lease{Owner: *owner, Token: *token, Until: until.UTC()}
	}
	return st, nil
}

// List implements outbox.Inspector.
func (s *Store) List(ctx context.Context, f outbox.ListFilter) ([]outbox.Record, error) {
	state, ok := map[outbox.State]string{
		"":                    "true",
		outbox.StatePending:   "published_at IS NULL AND NOT parked",
		outbox.StateParked:    "published_at IS NULL AND parked",
		outbox.StatePublished: "published_at IS NOT NULL",
	}[f.State]
	if !ok {
		return nil, fmt.Errorf("outboxpostgres: list: unknown state %q", f.State)
	}
	q := strings.Replace(s.sql.list, "{{STATE}}", state, 1)
	rows, err := s.pool.Query(ctx, q, f.AfterSeq, f.Destination, f.OrderingKey, f.PageLimit())
	if err != nil {
		return nil, wrapErr("list", err)
	}
	recs, err := scanRecords(rows, f.PageLimit())
	if err != nil {
		return nil, wrapErr("list", err)
	}
	return recs, nil
}

// Retry implements outbox.Inspector.
func (s *Store) Retry(ctx context.Context, req outbox.RetryRequest) (int, error) {
	seqs := req.Seqs
	if seqs == nil {
		seqs = []int64{}
	}
	tag, err := s.pool.Exec(ctx, s.sql.retry, micro(req.Now), seqs)
	if err != nil {
		return 0, wrapErr("retry", err)
	}
	return int(tag.RowsAffected()), nil
}
