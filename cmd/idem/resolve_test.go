package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// TestResolveSupersede: the conflict workflow on every operator store. A
// key processed with content A meets content B (a conflict, dead-lettered);
// the operator accepts B with idem resolve --supersede, confirmed and
// logged with who; B is then processed once, A is the conflict from then
// on, and B again is a duplicate. The prompt shows both contents where the
// guard kept a copy (Options.KeepPayload: the content holding the key;
// the other is the dead letter's); an answer other than yes
// changes nothing.
func TestResolveSupersede(t *testing.T) {
	for name, store := range operatorStores {
		t.Run(name, func(t *testing.T) {
			d := store(t)
			if name != "memory" && name != "redis" {
				if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK {
					t.Fatalf("migrate: %d %s %s", code, out, errs)
				}
			}
			ctx := context.Background()
			h, err := dsn.Open(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			g, err := idem.New(h.Store, idem.Options{Scope: "billing", KeepPayload: 64})
			if err != nil {
				t.Fatal(err)
			}
			a := idem.Message{ID: "order-7", Payload: []byte(`{"amount":10}`)}
			b := idem.Message{ID: "order-7", Payload: []byte(`{"amount":12}`)}
			ran := map[string]int{}
			handle := func(m idem.Message) idem.Handler {
				return func(context.Context) ([]byte, error) { ran[string(m.Payload)]++; return nil, nil }
			}
			if res, err := g.Do(ctx, a, handle(a)); err != nil || res.Outcome != idem.OutcomeProcessed {
				t.Fatalf("first content: %v %v", res.Outcome, err)
			}
			_, err = g.Do(ctx, b, handle(b))
			var ce *idem.ConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("second content: %v, want a conflict", err)
			}

			// Asked, and refused: nothing changes.
			c := newRoot(new(strings.Builder), new(strings.Builder))
			var prompt strings.Builder
			c.SetErr(&prompt)
			c.SetIn(strings.NewReader("n\n"))
			c.SetArgs([]string{"resolve", "billing", "order-7", "--supersede", "--fingerprint", ce.Fingerprint, "--store", d})
			if err := c.Execute(); err == nil {
				t.Fatal("resolve --supersede answered 'n': want a failure")
			}
			for _, want := range []string{`{\"amount\":10}`, ce.Record.Fingerprint, ce.Fingerprint, "idem dlq show", "Not superseded"} {
				if !strings.Contains(prompt.String(), want) {
					t.Errorf("the prompt does not show %s:\n%s", want, prompt.String())
				}
			}
			if _, err := g.Do(ctx, b, handle(b)); !errors.Is(err, idem.ErrConflict) {
				t.Fatalf("after a refused supersede: %v, want the conflict still", err)
			}

			if code, out, errs := runCmd(t, "resolve", "billing", "order-7", "--supersede", "--fingerprint", ce.Fingerprint,
				"--yes", "--as", "alice", "--store", d); code != exitOK || !strings.Contains(out, "superseded") ||
				!strings.Contains(errs, "who=alice") || !strings.Contains(errs, ce.Fingerprint) {
				t.Fatalf("resolve --supersede --yes: %d\n%s%s", code, out, errs)
			}
			if res, err := g.Do(ctx, b, handle(b)); err != nil || res.Outcome != idem.OutcomeProcessed || ran[string(b.Payload)] != 1 {
				t.Fatalf("the superseding content: %v %v, ran %v; want processed once", res.Outcome, err, ran)
			}
			if _, err := g.Do(ctx, a, handle(a)); !errors.Is(err, idem.ErrConflict) || ran[string(a.Payload)] != 1 {
				t.Fatalf("the old content after the supersede: %v, ran %v; want a conflict", err, ran)
			}
			if res, err := g.Do(ctx, b, handle(b)); err != nil || res.Outcome != idem.OutcomeDuplicate || ran[string(b.Payload)] != 1 {
				t.Fatalf("the superseding content again: %v %v, ran %v; want a duplicate", res.Outcome, err, ran)
			}
			// Nothing to supersede: the key holds that content already.
			if code, _, errs := runCmd(t, "resolve", "billing", "order-7", "--supersede", "--fingerprint", ce.Fingerprint, "--yes", "--store", d); code == exitOK || !strings.Contains(errs, "nothing to supersede") {
				t.Errorf("supersede with the content held: %d %s", code, errs)
			}
		})
	}
	if code, _, errs := runCmd(t, "resolve", "billing", "k", "--supersede", "--store", "memory://"); code == exitOK || !strings.Contains(errs, "--fingerprint") {
		t.Errorf("--supersede without --fingerprint: %d %s", code, errs)
	}
}
