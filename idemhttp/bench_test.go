package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgo/idem/idemhttp"
)

// benchHandler is a small JSON endpoint, so the benchmarks show the
// middleware's own cost.
var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/payments/1")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(`{"id":"pay_1","amount":100,"currency":"eur","status":"succeeded"}`))
})

const benchBody = `{"amount":100,"currency":"eur","source":"tok_visa","description":"order 42"}`

func benchRequest(key string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(benchBody))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-User", "alice")
	if key != "" {
		r.Header.Set(idemhttp.HeaderKey, key)
	}
	return r
}

// reportCPU adds a cpu-ns/op metric for the loop that follows (call it with
// defer before b.Loop).
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op") }
}

// BenchmarkBare is the handler alone: the baseline for the ratios.
func BenchmarkBare(b *testing.B) {
	defer reportCPU(b)()
	for b.Loop() {
		benchHandler.ServeHTTP(httptest.NewRecorder(), benchRequest(""))
	}
}

// BenchmarkMiddleware measures a first request (claim, run, record, complete)
// and a retry (claim, replay) per store, in-process (no network).
func BenchmarkMiddleware(b *testing.B) {
	for _, st := range stores {
		mw, err := idemhttp.New(st.open(b), idemhttp.Options{Scope: "bench", Principal: userPrincipal})
		if err != nil {
			b.Fatal(err)
		}
		h := mw.Wrap(benchHandler)
		b.Run(st.name+"/first", func(b *testing.B) {
			defer reportCPU(b)()
			i := 0
			for b.Loop() {
				i++
				w := httptest.NewRecorder()
				h.ServeHTTP(w, benchRequest("first-"+strconv.Itoa(i)))
				if w.Code != http.StatusCreated {
					b.Fatal(w.Code, w.Body)
				}
			}
		})
		b.Run(st.name+"/replay", func(b *testing.B) {
			h.ServeHTTP(httptest.NewRecorder(), benchRequest("replay"))
			defer reportCPU(b)()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, benchRequest("replay"))
				if w.Header().Get(idemhttp.HeaderReplayed) != "true" {
					b.Fatal(w.Code, w.Body)
				}
			}
		})
	}
}
