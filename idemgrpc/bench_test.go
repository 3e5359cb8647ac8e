package idemgrpc_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemgrpc/internal/idemgrpctest"
	"github.com/idemgo/idem/store/memory"
)

// BenchmarkUnary measures a Charge over bufconn: without the interceptor,
// and with it on store/memory, on new keys (claim, run, record) and replays
// of one key (idemgrpctest.Bench). idemgrpc/internal/integration's
// BenchmarkUnary measures it on the SQLite store.
func BenchmarkUnary(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		idemgrpctest.Invoke(b, idemgrpctest.ServeB(b, nil), nil)
	})
	b.Run("memory", func(b *testing.B) {
		idemgrpctest.Bench(b, func(testing.TB) idem.Store { return memory.New() })
	})
}
