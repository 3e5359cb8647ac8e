package idemhttp_test

import (
	"net/http/httptest"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp/internal/idemhttptest"
	"github.com/idemgo/idem/store/memory"
)

// BenchmarkBare is the handler alone: the baseline for the ratios.
func BenchmarkBare(b *testing.B) {
	defer idemhttptest.ReportCPU(b)()
	for b.Loop() {
		idemhttptest.BenchHandler.ServeHTTP(httptest.NewRecorder(), idemhttptest.BenchRequest(""))
	}
}

// BenchmarkMiddleware measures a first request (claim, run, record,
// complete) and a retry (claim, replay) on store/memory, in-process (no
// network); idemhttp/internal/integration's BenchmarkMiddleware measures
// them on the SQLite store.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		idemhttptest.BenchMiddleware(b, func(testing.TB) idem.Store { return memory.New() })
	})
}
