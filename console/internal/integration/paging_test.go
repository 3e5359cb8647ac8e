package integration_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/console"
	"github.com/idemgo/idem/store/storetest"
)

var (
	nextRE  = regexp.MustCompile(`<a rel="next" href="([^"]+)">`)
	tokenRE = regexp.MustCompile(`<td>\d+</td><td>(\d+)</td>`)
)

// TestPagingEveryID follows the Next page links through records of every
// id shape, ids over 1 KiB among them (whose display id is cut, so two of
// them look alike): each record is listed exactly once, in the store's
// order. Records are told apart by their fencing tokens, drawn at random.
func TestPagingEveryID(t *testing.T) {
	for _, s := range append(stores[:len(stores):len(stores)], serverStores...) {
		t.Run(s.name, func(t *testing.T) {
			st := s.open(t)
			ctx := context.Background()
			now := time.Now().UTC().Truncate(time.Second)
			for _, k := range storetest.PagingKeys() {
				_, err := st.Claim(ctx, idem.ClaimRequest{Key: k, Fingerprint: "fp", Now: now,
					LeaseUntil: now.Add(time.Hour), ExpiresAt: now.Add(24 * time.Hour)})
				if err != nil {
					t.Fatal(err)
				}
			}
			all, err := st.List(ctx, idem.ListFilter{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			var want []int64
			for _, r := range all {
				want = append(want, r.Token)
			}
			c := console.New(st, console.Options{PageSize: 3, CountsMaxAge: -1})
			t.Cleanup(func() { c.Close() })
			srv := httptest.NewServer(c)
			t.Cleanup(srv.Close)

			var got []int64
			next := "records"
			for range len(want) + 2 {
				code, body := get(t, srv.Client(), srv.URL+"/"+next)
				if code != http.StatusOK {
					t.Fatalf("%s: %d\n%s", next, code, body)
				}
				for _, m := range tokenRE.FindAllStringSubmatch(body, -1) {
					tok, _ := strconv.ParseInt(m[1], 10, 64)
					got = append(got, tok)
				}
				m := nextRE.FindStringSubmatch(body)
				if m == nil {
					break
				}
				next = html.UnescapeString(m[1])
			}
			if !slices.Equal(got, want) {
				t.Fatalf("paging listed %d records, want the %d in the store once each, in order\n got %v\nwant %v",
					len(got), len(want), got, want)
			}
			if code, _ := get(t, srv.Client(), srv.URL+"/records?after=order-1"); code != http.StatusBadRequest {
				t.Errorf("records?after= a plain id: %d, want 400 (not a page cursor)", code)
			}
		})
	}
}
