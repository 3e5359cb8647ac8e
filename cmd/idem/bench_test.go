package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/bench"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

func TestBenchJSON(t *testing.T) {
	for _, mode := range []string{"two-phase", "batch"} {
		t.Run(mode, func(t *testing.T) {
			code, out, errs := runCmd(t, "bench", "--store", "memory://", "--mode", mode, "--concurrency", "2",
				"--duration", "200ms", "--batch", "10", "--json")
			if code != exitOK {
				t.Fatalf("exit %d\n%s%s", code, out, errs)
			}
			res := decode(t, out)
			for _, k := range []string{"ops_per_sec", "p50_ms", "p99_ms", "baseline_ops_per_sec", "ratio"} {
				v, ok := res[k].(float64)
				if !ok || v <= 0 {
					t.Errorf("%s = %v, want a positive number", k, res[k])
				}
			}
			if res["p99_ms"].(float64) < res["p50_ms"].(float64) {
				t.Errorf("p99 %v < p50 %v", res["p99_ms"], res["p50_ms"])
			}
		})
	}
}

// A run in several slices keeps every key new: the two-phase and batch
// ops fail on a key that is not.
func TestBenchRoundsKeepKeysNew(t *testing.T) {
	for _, mode := range []string{"two-phase", "batch"} {
		code, out, errs := runCmd(t, "bench", "--store", "memory://", "--mode", mode, "--concurrency", "2",
			"--duration", "300ms", "--rounds", "5", "--batch", "10", "--json")
		if code != exitOK {
			t.Fatalf("%s: exit %d\n%s%s", mode, code, out, errs)
		}
		res := decode(t, out)
		if res["rounds"] != float64(5) || res["errors"] != float64(0) || res["ops"].(float64) <= 0 {
			t.Fatalf("%s: %v", mode, res)
		}
	}
	if code, _, errs := runCmd(t, "bench", "--store", "memory://", "--rounds", "0"); code != exitUsage || !strings.Contains(errs, "--rounds") {
		t.Fatalf("--rounds 0: exit %d: %s", code, errs)
	}
}

func TestBenchText(t *testing.T) {
	code, out, errs := runCmd(t, "bench", "--store", "memory://", "--concurrency", "1", "--duration", "100ms")
	if code != exitOK || !strings.Contains(out, "keys/s") || !strings.Contains(out, "ratio") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"baseline: map insert under a mutex", "above 1 here would be one run's noise"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
}

// Against PostgreSQL's baseline, tx mode saves a round trip: the output
// names the baseline and says why the ratio can exceed 1.
func TestBenchSaysWhyARatioCanExceedOne(t *testing.T) {
	d := operatorStores["postgres"](t)
	if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	code, out, errs := runCmd(t, "bench", "--store", d, "--mode", "tx", "--concurrency", "2", "--duration", "200ms")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	for _, want := range []string{"baseline: INSERT INTO … (k) VALUES ($1) ON CONFLICT DO NOTHING per transaction (pgx.BeginFunc",
		"two round trips against three", "the ratio can exceed 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("bench output lacks %q:\n%s", want, out)
		}
	}
	res := decode(t, runOK(t, "bench", "--store", d, "--mode", "tx", "--concurrency", "2", "--duration", "200ms", "--json"))
	if note, _ := res["ratio_note"].(string); !strings.Contains(note, "can exceed 1") {
		t.Errorf("ratio_note = %q", note)
	}
}

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := runCmd(t, args...)
	if code != exitOK {
		t.Fatalf("idem %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func TestBenchTxNeedsInbox(t *testing.T) {
	code, _, errs := runCmd(t, "bench", "--store", "memory://", "--mode", "tx", "--duration", "100ms")
	if code != exitUsage || !strings.Contains(errs, "no transactional inbox") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

func TestBenchSQLiteTx(t *testing.T) {
	d := "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "bench.db"))
	code, out, errs := runCmd(t, "bench", "--store", d, "--mode", "tx", "--concurrency", "2", "--duration", "300ms", "--json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	res := decode(t, out)
	if res["mode"] != "tx" || res["ops_per_sec"].(float64) <= 0 || res["baseline_ops_per_sec"].(float64) <= 0 {
		t.Fatalf("%v", res)
	}
	if res["errors"] != float64(0) {
		t.Errorf("errors: %v", res["errors"])
	}
}

// --prefill loads the records on every kind of store, with the ids and
// fingerprints the loaders share, the expired share asked for, and a second
// run reuses them; --sweep then deletes the expired ones.
func TestBenchPrefill(t *testing.T) {
	for _, kind := range []string{"memory", "sqlite", "postgres", "mysql", "redis"} {
		t.Run(kind, func(t *testing.T) {
			d := operatorStores[kind](t)
			if kind == "postgres" || kind == "mysql" {
				runOK(t, "migrate", "--store", d)
			}
			expired := "0.3"
			if kind == "memory" || kind == "redis" {
				expired = "0" // written through the store's claims: live records only
			}
			args := []string{"bench", "--store", d, "--prefill", "1000", "--prefill-expired", expired, "--prefill-result", "16",
				"--concurrency", "2", "--duration", "100ms", "--rounds", "1", "--json"}
			first := args
			if kind == "sqlite" || kind == "postgres" {
				first = append(first[:len(first):len(first)], "--sweep", "--sweep-batch", "100")
			}
			res := decode(t, runOK(t, first...))
			pre, _ := res["prefill"].(map[string]any)
			want := 0.0
			if expired != "0" {
				want = 300
			}
			if pre["records"] != float64(1000) || pre["loaded"] != float64(1000) || pre["expired"] != want {
				t.Fatalf("prefill = %v", pre)
			}
			if sz, ok := res["size"].(map[string]any); kind != "memory" && kind != "redis" && (!ok || sz["rows"].(float64) < 1000 || sz["bytes_per_record"].(float64) <= 0) {
				t.Errorf("size = %v", res["size"])
			}
			ctx := context.Background()
			h, err := dsn.Open(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			k, fp := bench.PrefillKey(999) // live: the oldest 300 are the expired ones
			if r, err := h.Store.Get(ctx, k); err != nil || r.Fingerprint != fp || r.State != idem.StateCompleted || len(r.Result) != 16 {
				t.Fatalf("record 999: %+v %v; want completed, fingerprint %s, 16-byte result", r, err, fp)
			}
			left := int64(1000)
			if sw, ok := res["sweep"].(map[string]any); ok {
				if sw["swept"].(float64) < pre["expired"].(float64) {
					t.Errorf("sweep = %v; want the %v expired records swept", sw, pre["expired"])
				}
				left -= int64(pre["expired"].(float64))
			}
			if in, ok := h.Store.(idem.Inspector); ok {
				st, err := in.Stats(ctx, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				var completed int64
				for _, s := range st {
					if s.Scope == bench.PrefillScope {
						completed = s.Completed
					}
				}
				if completed != left {
					t.Errorf("Stats: %d completed records in %s, want %d", completed, bench.PrefillScope, left)
				}
			}
			// The second run finds the prefill there (or reloads only what
			// the sweep removed), whatever other keys its scope holds, and
			// refuses a smaller size.
			g, err := idem.New(h.Store, idem.Options{Scope: bench.PrefillScope})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.Do(ctx, idem.Message{ID: "ffffffffffffffffffffffffffffffff"}, func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
				t.Fatal(err)
			}
			again := decode(t, runOK(t, args...))
			if p := again["prefill"].(map[string]any); p["loaded"] != float64(1000-left) {
				t.Errorf("second prefill = %v; want %d reloaded", p, 1000-left)
			}
			if code, _, errs := runCmd(t, "bench", "--store", d, "--prefill", "10", "--duration", "100ms"); code != exitUsage || !strings.Contains(errs, "more than 10 records") {
				t.Errorf("smaller prefill: exit %d: %s", code, errs)
			}
		})
	}
}
