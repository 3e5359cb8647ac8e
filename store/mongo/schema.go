package mongoidem

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/idemgo/idem"
)

// codeNamespaceNotFound is the server's answer to listing the indexes of a
// collection that does not exist.
const codeNamespaceNotFound = 26

// CheckSchema reports drift without changing anything: nil when the
// indexes Migrate creates exist (ExpiresIndex, which Sweep and Stats read,
// and TTLIndexName where Options.TTLIndex is TTLRequired), else an
// *idem.SchemaError naming each one missing (`idem migrate --check`). A
// dropped collection is made again by the next write, without its indexes;
// Migrate, which keeps no bookkeeping and creates them every time, restores
// them.
func (s *Store) CheckSchema(ctx context.Context) error {
	want := []string{ExpiresIndex}
	if s.opts.TTLIndex == TTLRequired {
		want = append(want, TTLIndexName)
	}
	have := map[string]bool{}
	cur, err := s.coll.Indexes().List(ctx)
	switch {
	case hasCode(err, codeNamespaceNotFound):
	case err != nil:
		return fmt.Errorf("mongoidem: check schema of %s: %w", s.opts.Collection, err)
	default:
		var idx []bson.M
		if err := cur.All(ctx, &idx); err != nil {
			return fmt.Errorf("mongoidem: check schema of %s: %w", s.opts.Collection, err)
		}
		for _, ix := range idx {
			if name, ok := ix["name"].(string); ok {
				have[name] = true
			}
		}
	}
	var miss []string
	for _, name := range want {
		if !have[name] {
			miss = append(miss, "index "+s.opts.Collection+"."+name)
		}
	}
	if len(miss) == 0 {
		return nil
	}
	return &idem.SchemaError{Missing: miss}
}
