package idemhttptest

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/internal/testenv"
)

// BenchHandler is a small JSON endpoint, so the benchmarks show the
// middleware's own cost.
var BenchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/1")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":"pay_1","amount":100,"currency":"eur","status":"succeeded"}`))
})

const benchBody = `{"amount":100,"currency":"eur","source":"tok_visa","description":"order 42"}`

// BenchRequest is a payment request as alice, with key unless it is empty.
func BenchRequest(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(benchBody))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-User", "alice")
	if key != "" {
		r.Header.Set(idemhttp.HeaderKey, key)
	}
	return r
}

// ReportCPU adds a cpu-ns/op metric for the loop that follows (call it with
// defer before b.Loop).
func ReportCPU(b *testing.B) func() {
	start, ok := testenv.ProcessCPU()
	return func() {
		if end, ok2 := testenv.ProcessCPU(); ok && ok2 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// BenchMiddleware measures a first request (claim, run, record, complete)
// and a retry (claim, replay) on a store from open, in-process (no
// network).
func BenchMiddleware(b *testing.B, open func(testing.TB) idem.Store) {
	mw, err := idemhttp.New(open(b), idemhttp.Options{Scope: "bench", Principal: UserPrincipal})
	if err != nil {
		b.Fatal(err)
	}
	h := mw.Wrap(BenchHandler)
	b.Run("first", func(b *testing.B) {
		defer ReportCPU(b)()
		i := 0
		for b.Loop() {
			i++
			w := httptest.NewRecorder()
			h.ServeHTTP(w, BenchRequest("first-"+strconv.Itoa(i)))
			if w.Code != http.StatusCreated {
				b.Fatal(w.Code, w.Body)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		h.ServeHTTP(httptest.NewRecorder(), BenchRequest("replay"))
		defer ReportCPU(b)()
		for b.Loop() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, BenchRequest("replay"))
			if w.Header().Get(idemhttp.HeaderReplayed) != "true" {
				b.Fatal(w.Code, w.Body)
			}
		}
	})
}
