package sqlite_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgo/idem/store/sqlite"
)

// TestQueryPlans checks that the sweep and the claim path use indexes, not
// table scans: the table is meant to hold 100M rows.
func TestQueryPlans(t *testing.T) {
	s := openStore(t, sqlite.Options{})
	table := sqlite.DefaultTable
	for _, c := range []struct {
		query, want string
		args        []any
	}{
		// The sweep's batch: a range of the expires_at index, each row
		// looked up by rowid to skip live leases.
		{sqlite.SweepQuery(s), "USING INDEX " + table + "_expires_at (expires_at<?)", []any{5, 10}},
		{`SELECT * FROM ` + table + ` WHERE scope = 'a' AND id = 'b'`, "USING INDEX sqlite_autoindex_" + table, nil},
		{`SELECT * FROM ` + table + ` WHERE (scope, id) > ('a', 'b') ORDER BY scope, id LIMIT 10`, "USING INDEX sqlite_autoindex_" + table, nil},
	} {
		rows, err := s.DB().QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+c.query, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, c.want) || strings.Contains(p, "TEMP B-TREE") || strings.Contains(p, "SCAN ") {
			t.Errorf("plan of %s:\n  %s\nwant %s", c.query, p, c.want)
		}
	}
}
