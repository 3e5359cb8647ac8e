package main

import (
	"path/filepath"
	"strings"
	"testing"
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
