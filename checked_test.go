package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
)

// rewriting is a store wrapper that changes the guard's requests before
// the store sees them, and keeps the store's answer.
type rewriting struct {
	*memory.Store
	rewrite func(*idem.ClaimRequest, int)
	err     *error
}

func (s rewriting) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	s.rewrite(&req, 0)
	c, err := s.Store.Claim(ctx, req)
	*s.err = err
	return c, err
}

func (s rewriting) ClaimBatch(ctx context.Context, reqs []idem.ClaimRequest) ([]idem.Claim, error) {
	for i := range reqs {
		s.rewrite(&reqs[i], i)
	}
	cs, err := s.Store.ClaimBatch(ctx, reqs)
	*s.err = err
	return cs, err
}

// A request the guard checked and someone changed on its way to the store
// is checked again in full (storekit.PrepareClaim, CheckBatchKeys).
func TestChangedRequestsCheckedAgain(t *testing.T) {
	ctx := context.Background()
	h := func(context.Context) ([]byte, error) { return nil, nil }
	for _, tc := range []struct {
		name    string
		rewrite func(*idem.ClaimRequest, int)
		want    error
		batch   bool
	}{
		{"invalid key", func(r *idem.ClaimRequest, _ int) { r.Key.ID = "a\x00b" }, idem.ErrInvalidKey, false},
		{"empty scope", func(r *idem.ClaimRequest, _ int) { r.Key.Scope = "" }, idem.ErrInvalidKey, false},
		{"invalid key in a batch", func(r *idem.ClaimRequest, i int) {
			if i == 1 {
				r.Key.ID = "a\x00b"
			}
		}, idem.ErrInvalidKey, true},
		{"repeated key in a batch", func(r *idem.ClaimRequest, _ int) { r.Key.ID = "same" }, idem.ErrDuplicateKeyInBatch, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			g := guard(t, rewriting{memory.New(), tc.rewrite, &err}, idem.Options{})
			if tc.batch {
				_, _ = g.ClaimBatch(ctx, []idem.Message{{ID: "m1", Payload: []byte("x")}, {ID: "m2", Payload: []byte("y")}})
			} else {
				_, _ = g.Do(ctx, idem.Message{ID: "m", Payload: []byte("x")}, h)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("the store answered %v, want %v", err, tc.want)
			}
		})
	}
}
