package chaos

import (
	"slices"
	"strings"
	"testing"
)

// TestJudgeDeadLetters: an order may end uncharged only dead-lettered, and
// dead-lettered at its delivery limit only after the handler failed it. A
// dead letter of an order the handler never failed is a failure of the
// verdict, and so is an order neither charged nor dead-lettered.
func TestJudgeDeadLetters(t *testing.T) {
	order := func(id string) Order { return Order{Order: id, Account: "a-01", Amount: 10} }
	plan := &Plan{
		Contents: map[string][]Order{},
		Poison:   map[string]string{},
		Fails:    map[string]int{"o-failed": failAlways, "o-flaky": flakyFails},
	}
	for _, id := range []string{"o-applied", "o-failed", "o-flaky", "o-never-failed", "o-lost"} {
		plan.Contents[id] = []Order{order(id)}
	}
	ef := &effects{
		charges:  map[string][]Order{"o-applied": {order("o-applied")}, "o-flaky": {order("o-flaky")}},
		balances: map[string]int64{"a-01": 20},
	}
	dls := []deadLetter{
		{id: "o-failed", reason: "max_deliver", order: order("o-failed"), decodes: true},
		{id: "o-failed", reason: "max_deliver", order: order("o-failed"), decodes: true}, // at least once
		{id: "o-flaky", reason: "delivery_limit", order: order("o-flaky"), decodes: true},
		{id: "o-never-failed", reason: "max_deliver", order: order("o-never-failed"), decodes: true},
	}
	failed := map[string]int{"o-failed": 4, "o-flaky": 2}

	var p Pass
	judge(plan, ef, dls, failed, &p, false)
	got := map[string]int{"applied": p.Applied, "lost": p.Lost, "failed_dl": p.FailedDL, "dl_without_failure": p.DLWithoutFailure,
		"other_dl": p.OtherDL, "handler_failures": p.HandlerFailures, "failed_orders": p.FailedOrders, "doubles": p.Doubles}
	want := map[string]int{"applied": 2, "lost": 1, "failed_dl": 1, "dl_without_failure": 1,
		"other_dl": 1, "handler_failures": 6, "failed_orders": 2, "doubles": 0}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %d, want %d", k, got[k], w)
		}
	}
	problems := strings.Join(p.Problems, "\n")
	for _, id := range []string{"o-never-failed", "o-lost"} {
		if !strings.Contains(problems, id) {
			t.Errorf("no problem names %s:\n%s", id, problems)
		}
	}
	for _, id := range []string{"o-applied", "o-failed", "o-flaky"} {
		if strings.Contains(problems, id+" ") || strings.Contains(problems, id+":") {
			t.Errorf("a problem names %s:\n%s", id, problems)
		}
	}
	if len(p.Problems) != 2 {
		t.Errorf("%d problems, want 2:\n%s", len(p.Problems), problems)
	}

	// The naive pass is judged for its figures only.
	var n Pass
	judge(plan, ef, dls, failed, &n, true)
	if len(n.Problems) != 0 || n.Lost != 1 || n.DLWithoutFailure != 1 {
		t.Errorf("naive pass: lost %d, dead-lettered without failure %d, problems %v", n.Lost, n.DLWithoutFailure, n.Problems)
	}
}

// TestInjectedFailures: the handler fails a flaky order its planned number
// of times across consumer processes (one failer each, one directory), an
// always-failing one every time, and the files left are the count the
// verdict reads.
func TestInjectedFailures(t *testing.T) {
	dir := t.TempDir()
	plan := &Plan{Fails: map[string]int{"o-000001": flakyFails, "o-000002": failAlways}}
	if err := writeFailPlan(dir, plan); err != nil {
		t.Fatal(err)
	}
	a, err := openFailer(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openFailer(dir)
	if err != nil {
		t.Fatal(err)
	}
	var flaky []bool
	for _, f := range []*failer{a, b, a, b} {
		flaky = append(flaky, f.fail("o-000001") != nil)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(flaky, want) {
		t.Errorf("flaky order failed %v, want %v", flaky, want)
	}
	for i, f := range []*failer{a, b, a, b, a} {
		if f.fail("o-000002") == nil {
			t.Errorf("always-failing order not failed at run %d", i+1)
		}
	}
	if err := a.fail("o-000003"); err != nil {
		t.Errorf("an order the plan does not fail: %v", err)
	}
	none, err := openFailer("")
	if err != nil || none.fail("o-000001") != nil {
		t.Errorf("no failure directory (the naive consumer) must fail nothing: %v", err)
	}
	got, err := readFailures(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["o-000001"] != flakyFails || got["o-000002"] != 5 {
		t.Errorf("failures read %v, want o-000001:2 o-000002:5", got)
	}
}
