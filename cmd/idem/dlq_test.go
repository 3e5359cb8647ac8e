package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/cmd/idem/internal/dlq"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// dlqBroker is one broker of the dead-letter test: where its dead letters
// are (the --broker URL), a producer, and a real idem consumer.
type dlqBroker interface {
	url() string
	// publish sends body under key as the adapter's producer helper does:
	// with the broker's duplicate id (idem.DedupID) where the broker
	// deduplicates, on a destination whose duplicate window outlasts the
	// test, so that the replays run inside it.
	publish(t *testing.T, key, body string)
	// consume runs an idem consumer on store until ctx ends, calling h for
	// each message and ev for each report.
	consume(ctx context.Context, t *testing.T, store idem.Store, h func(key, body string) error, ev *dlqEvents) error
	// keepsReplayed says the broker keeps a replayed dead letter (Kafka).
	keepsReplayed() bool
}

// dlqEvents is what the consumer reported, for the test to wait on.
type dlqEvents struct {
	processed chan string // the key of each message processed
	dead      chan string // the reason of each dead letter
}

func newDLQEvents() *dlqEvents {
	return &dlqEvents{processed: make(chan string, 16), dead: make(chan string, 16)}
}

// report files one broker report.
func (e *dlqEvents) report(r broker.Report, deadLettered bool) {
	switch {
	case deadLettered:
		e.dead <- r.Reason
	case r.Action == idem.ActionAck && r.Result.Outcome == idem.OutcomeProcessed:
		e.processed <- r.Result.Key.ID
	}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
	}
	var zero T
	return zero
}

// dlqRun is a real idem consumer of a broker on a named memory store,
// after it dead-lettered a conflict (key k1 reused with other content) and
// a permanent failure (k2, never processed). It stops when the test ends.
type dlqRun struct {
	store string // the store's DSN
	h     *dsn.Handle
	ev    *dlqEvents

	mu      sync.Mutex
	fixed   bool           // k2's handler succeeds
	applied map[string]int // key=body -> times the handler applied it
}

func startDLQRun(t *testing.T, b dlqBroker) *dlqRun {
	t.Helper()
	r := &dlqRun{store: fmt.Sprintf("memory://dlq-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), rand.Uint32()),
		ev: newDLQEvents(), applied: map[string]int{}}
	h, err := dsn.Open(context.Background(), r.store)
	if err != nil {
		t.Fatal(err)
	}
	r.h = h
	handler := func(key, body string) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if body == "fail" && !r.fixed {
			return idem.Permanent(errors.New("card declined"))
		}
		r.applied[key+"="+body]++
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.consume(ctx, t, h.Store, handler, r.ev) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("consumer: %v", err)
		}
	})

	b.publish(t, "k1", "first")
	if k := wait(t, r.ev.processed, "processed k1"); k != "k1" {
		t.Fatalf("processed %q, want k1", k)
	}
	b.publish(t, "k1", "second")
	b.publish(t, "k2", "fail")
	reasons := map[string]bool{wait(t, r.ev.dead, "dead letter"): true, wait(t, r.ev.dead, "dead letter"): true}
	if !reasons["conflict"] || !reasons["permanent"] {
		t.Fatalf("dead-letter reasons %v, want conflict and permanent", reasons)
	}
	return r
}

// fix makes k2's handler succeed from now on.
func (r *dlqRun) fix() {
	r.mu.Lock()
	r.fixed = true
	r.mu.Unlock()
}

// checkReplayed waits for the replay of both dead letters: the conflict
// dead-lettered again, k2 applied; k1's first content and k2 are applied
// once each.
func (r *dlqRun) checkReplayed(t *testing.T) {
	t.Helper()
	if reason := wait(t, r.ev.dead, "the conflict dead-lettered again"); reason != "conflict" {
		t.Fatalf("replayed: dead-lettered as %q, want conflict", reason)
	}
	if k := wait(t, r.ev.processed, "processed k2"); k != "k2" {
		t.Fatalf("replayed: processed %q, want k2", k)
	}
	r.mu.Lock()
	got := fmt.Sprint(r.applied)
	r.mu.Unlock()
	if got != "map[k1=first:1 k2=fail:1]" {
		t.Errorf("applied %s, want k1's first content and k2 once each", got)
	}
}

// runDLQScenario: over startDLQRun's dead letters, idem dlq lists both
// with their reasons, shows the conflict beside the stored record (other
// fingerprints: the stored content holds the key), and replays both with
// --yes: the conflict is dead-lettered again, k2 is applied once, and the
// log says who replayed.
func runDLQScenario(t *testing.T, b dlqBroker) {
	run := startDLQRun(t, b)
	store := run.store

	dls := dlqList(t, b.url())
	if len(dls) != 2 {
		t.Fatalf("idem dlq list: %d dead letters, want 2: %v", len(dls), dls)
	}
	byReason := map[string]map[string]any{}
	for _, d := range dls {
		byReason[d["reason"].(string)] = d
	}
	conflict, permanent := byReason["conflict"], byReason["permanent"]
	if conflict == nil || permanent == nil || !strings.HasSuffix(fmt.Sprint(conflict["key"]), "/k1") || !strings.HasSuffix(fmt.Sprint(permanent["key"]), "/k2") {
		t.Fatalf("idem dlq list: %v", dls)
	}
	code, out, errs := runCmd(t, "dlq", "list", "--broker", b.url())
	if code != exitOK || !strings.Contains(out, "conflict") || !strings.Contains(out, "permanent") || !strings.Contains(out, "2 dead letters") {
		t.Fatalf("idem dlq list: exit %d\n%s%s", code, out, errs)
	}

	// show: the dead letter's fingerprint beside the stored record's.
	cid := fmt.Sprint(conflict["id"])
	code, out, errs = runCmd(t, "dlq", "show", cid, "--broker", b.url(), "--store", store, "--json")
	if code != exitOK {
		t.Fatalf("idem dlq show: exit %d\n%s%s", code, out, errs)
	}
	shown := decode(t, out)
	rec, _ := shown["record"].(map[string]any)
	dl, _ := shown["dead_letter"].(map[string]any)
	if rec == nil || rec["state"] != "completed" || rec["fingerprint"] == "" || dl["fingerprint"] == "" || rec["fingerprint"] == dl["fingerprint"] {
		t.Fatalf("idem dlq show --json: record %v beside dead letter %v: want the completed record with another fingerprint", rec, dl)
	}
	// The content holding the key, kept by the guard (KeepPayload), beside
	// the dead letter's, and the command that would accept the latter.
	if shown["record_payload"] != "first" {
		t.Errorf("idem dlq show --json: record_payload %q, want the winning content %q", shown["record_payload"], "first")
	}
	code, out, errs = runCmd(t, "dlq", "show", cid, "--broker", b.url(), "--store", store)
	if code != exitOK || !strings.Contains(out, "STORED RECORD") || !strings.Contains(out, rec["fingerprint"].(string)) ||
		!strings.Contains(out, dl["fingerprint"].(string)) || !strings.Contains(out, "other content") ||
		!strings.Contains(out, "first") || !strings.Contains(out, "--supersede --fingerprint "+dl["fingerprint"].(string)) {
		t.Fatalf("idem dlq show: exit %d\n%s%s", code, out, errs)
	}

	// replay, unconfirmed: nothing happens.
	c := newRoot(new(strings.Builder), new(strings.Builder))
	c.SetIn(strings.NewReader("n\n"))
	c.SetArgs([]string{"dlq", "replay", "--all", "--broker", b.url()})
	if err := c.Execute(); err == nil {
		t.Fatal("idem dlq replay answered 'n': want a failure")
	}
	if n := len(dlqList(t, b.url())); n != 2 {
		t.Fatalf("after a refused replay: %d dead letters, want 2", n)
	}

	run.fix()
	code, out, errs = runCmd(t, "dlq", "replay", cid+","+fmt.Sprint(permanent["id"]), "--yes", "--as", "tester", "--broker", b.url())
	if code != exitOK || !strings.Contains(out, "Replayed 2 of 2") || strings.Count(errs, "who=tester") != 2 {
		t.Fatalf("idem dlq replay: exit %d\n%s%s", code, out, errs)
	}
	run.checkReplayed(t)
	want := 1 // the conflict, dead-lettered again
	if b.keepsReplayed() {
		want = 3
	}
	after := dlqList(t, b.url())
	if len(after) != want {
		t.Fatalf("after the replay: %d dead letters, want %d: %v", len(after), want, after)
	}
	if code, out, errs := runCmd(t, "dlq", "replay", "--reason", "conflict", "--yes", "--broker", b.url(), "--json"); code != exitOK ||
		len(decode(t, out)["replayed"].([]any)) != want-btoi(b.keepsReplayed()) {
		t.Fatalf("idem dlq replay --reason conflict: exit %d\n%s%s", code, out, errs)
	}
	if r := wait(t, run.ev.dead, "the conflict dead-lettered once more"); r != "conflict" {
		t.Fatalf("replayed by reason: dead-lettered as %q, want conflict", r)
	}
}

// dlqList is idem dlq list --json's dead letters.
func dlqList(t *testing.T, url string) []map[string]any {
	t.Helper()
	code, out, errs := runCmd(t, "dlq", "list", "--json", "--broker", url)
	if code != exitOK {
		t.Fatalf("idem dlq list: exit %d\n%s%s", code, out, errs)
	}
	var dls []map[string]any
	for _, d := range decode(t, out)["dead_letters"].([]any) {
		dls = append(dls, d.(map[string]any))
	}
	return dls
}

func TestDLQUsage(t *testing.T) {
	t.Setenv("IDEM_BROKER", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "list"}, "no broker given"},
		{[]string{"dlq", "list", "--broker", "http://x"}, "bad broker URL"},
		{[]string{"dlq", "list", "--broker", "nats://127.0.0.1:1"}, "?dlq="},
		{[]string{"dlq", "replay", "--broker", "nats://127.0.0.1:1?dlq=D"}, "exactly one"},
		{[]string{"dlq", "replay", "1", "--all", "--broker", "nats://127.0.0.1:1?dlq=D"}, "exactly one"},
		{[]string{"dlq", "list", "--broker", "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=secret"}, "EntityPath"},
		{[]string{"dlq", "list", "--broker", "eventhubs:Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=secret"}, "EntityPath=HUB"},
		{[]string{"dlq", "list", "--broker", "EventHubs:Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=secret"}, "EntityPath=HUB"},
	} {
		code, _, errs := runCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) || strings.Contains(errs, "secret") {
			t.Errorf("%v: exit %d, want %d and %q\n%s", tc.args, code, exitUsage, tc.want, errs)
		}
	}
}

// A Service Bus connection string and an Event Hubs one have one shape:
// the bare string is Service Bus's, the one after eventhubs: Event Hubs',
// in any case; both have their key redacted.
func TestDriverConnectionStrings(t *testing.T) {
	cs := "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey=s3cr+t/=;EntityPath=orders"
	for raw, kind := range map[string]string{cs: "servicebus", "eventhubs:" + cs: "eventhubs", "EVENTHUBS:" + cs: "eventhubs", " eventhubs:" + cs: "eventhubs"} {
		d, _, err := driverOf(raw)
		if err != nil || d.kind != kind {
			t.Errorf("driverOf(%q) = %v, %v; want %s", raw, d, err, kind)
		}
		if r := dlq.Redact(strings.TrimSpace(raw)); strings.Contains(r, "s3cr") || !strings.Contains(r, "SharedAccessKey=xxxxx") {
			t.Errorf("Redact(%q) = %q", raw, r)
		}
	}
}
