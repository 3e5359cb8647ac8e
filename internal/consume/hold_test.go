package consume_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/internal/consume"
	"github.com/idemgo/idem/store/memory"
)

func guard(t *testing.T, s idem.Store) *idem.Guard {
	t.Helper()
	g, err := idem.New(s, idem.Options{Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// heldKey returns a guard whose store holds key "k" in progress with a
// live lease of lease, at a standing clock.
func heldKey(t *testing.T, lease time.Duration) *idem.Guard {
	t.Helper()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	g, err := idem.New(memory.New(), idem.Options{Scope: "s", Lease: lease, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Store().Claim(context.Background(), idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: "k"},
		Now: now, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDriverClaim(t *testing.T) {
	g := heldKey(t, time.Minute)
	ran := 0
	h := broker.Handle(func(context.Context, string) ([]byte, error) { ran++; return nil, nil })
	backoff := func(round int) time.Duration { return time.Duration(round) * time.Second }
	tests := []struct {
		name     string
		maxHold  time.Duration
		last     bool
		id       string
		wantHeld bool
		wantWait time.Duration
	}{
		{"another key is not held", time.Hour, false, "other", false, 0},
		{"in progress: held for the back-off", time.Hour, false, "k", true, time.Second},
		{"no hold allowed", -1, false, "k", false, 0},
		{"no hold allowed, last delivery", -1, true, "k", true, time.Second},
		{"the wait never passes MaxHold", 200 * time.Millisecond, false, "k", true, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := consume.Driver[string]{Handler: h, Guard: g, Backoff: backoff, MaxHold: tt.maxHold}
			p := &consume.Pending[string]{Message: idem.Message{ID: tt.id}, Attempt: 1, Last: tt.last}
			wait, held := d.Claim(context.Background(), p)
			if held != tt.wantHeld || (held && (wait > tt.wantWait || wait < tt.wantWait-50*time.Millisecond)) || p.WasHeld() != held {
				t.Fatalf("Claim = %v, %v (was held %v); want %v, %v", wait, held, p.WasHeld(), tt.wantHeld, tt.wantWait)
			}
		})
	}
	if ran != 1 {
		t.Fatalf("handler ran %d times, want once (for the other key)", ran)
	}
}

// TestDriverRetryDelay: a key in progress is retried when the holder's
// lease ends (the clock stands still: the whole lease, plus jitter), any
// other retry on the attempt's back-off.
func TestDriverRetryDelay(t *testing.T) {
	g := heldKey(t, time.Minute)
	d := consume.Driver[string]{Handler: broker.Handle(func(context.Context, string) ([]byte, error) {
		return nil, errors.New("down")
	}), Guard: g, Backoff: func(a int) time.Duration { return time.Duration(a) * time.Millisecond }, MaxHold: -1}
	p := &consume.Pending[string]{Message: idem.Message{ID: "k"}, Attempt: 3}
	d.Drive(context.Background(), nil, p)
	if r := d.RetryDelay(p); !errors.Is(p.Err, idem.ErrInProgress) || r < time.Minute || r > time.Minute+time.Second+10*time.Millisecond {
		t.Fatalf("in progress: RetryDelay = %v (err %v), want the lease", r, p.Err)
	}
	p = &consume.Pending[string]{Message: idem.Message{ID: "free"}, Attempt: 3}
	d.Drive(context.Background(), nil, p)
	if r := d.RetryDelay(p); r != 3*time.Millisecond {
		t.Fatalf("failed handler: RetryDelay = %v, want the back-off of attempt 3", r)
	}
}

// TestDriverDecide: a retry on the broker's last delivery is a max_deliver
// dead letter; before it, a retry with the attempt's back-off.
func TestDriverDecide(t *testing.T) {
	d := consume.Driver[string]{Handler: broker.Handle(func(context.Context, string) ([]byte, error) {
		return nil, errors.New("down")
	}), Guard: guard(t, memory.New()), Backoff: func(a int) time.Duration { return time.Duration(a) * time.Second }, MaxHold: -1}
	for _, last := range []bool{false, true} {
		p := &consume.Pending[string]{Message: idem.Message{ID: "k"}, Attempt: 2, Last: last}
		d.Drive(context.Background(), nil, p)
		r := d.Decide(p)
		switch {
		case !last && (r.Action != idem.ActionRetry || r.Delay != 2*time.Second || r.Attempt != 2):
			t.Fatalf("not last: %+v, want a retry after 2s", r)
		case last && (r.Action != idem.ActionDeadLetter || r.Reason != broker.ReasonMaxDeliver || r.Delay != 0):
			t.Fatalf("last: %+v, want a max_deliver dead letter", r)
		}
	}
}

// TestDriverStop: a closed stop ends a hold at once; on the last delivery
// only the context does.
func TestDriverStop(t *testing.T) {
	g := heldKey(t, time.Minute)
	d := consume.Driver[string]{Handler: broker.Handle(func(context.Context, string) ([]byte, error) { return nil, nil }),
		Guard: g, Backoff: func(int) time.Duration { return time.Millisecond }, MaxHold: time.Hour}
	stop := make(chan struct{})
	close(stop)
	p := &consume.Pending[string]{Message: idem.Message{ID: "k"}}
	d.Drive(context.Background(), stop, p)
	if !errors.Is(p.Err, idem.ErrInProgress) || !p.WasHeld() {
		t.Fatalf("stopped: err %v, was held %v", p.Err, p.WasHeld())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	p = &consume.Pending[string]{Message: idem.Message{ID: "k"}, Last: true}
	d.Drive(ctx, stop, p)
	if !errors.Is(p.Err, idem.ErrInProgress) || ctx.Err() == nil {
		t.Fatalf("last delivery: err %v, returned before its context ended (%v)", p.Err, ctx.Err())
	}
}

func TestHeaderText(t *testing.T) {
	if got := consume.HeaderText("a\r\nb\nc"); got != "a  b c" {
		t.Fatalf("HeaderText = %q", got)
	}
	long := strings.Repeat("é", consume.MaxHeaderText) // two bytes each
	got := consume.HeaderText(long)
	if !utf8.ValidString(got) || len(got) > consume.MaxHeaderText+len("…") || !strings.HasSuffix(got, "…") {
		t.Fatalf("HeaderText of %d bytes = %d bytes, valid %v", len(long), len(got), utf8.ValidString(got))
	}
	if got := consume.HeaderText("bad \xff byte"); !utf8.ValidString(got) {
		t.Fatalf("HeaderText = %q, not valid UTF-8", got)
	}
}

func TestDeadLetterHeaders(t *testing.T) {
	g := guard(t, memory.New())
	im := idem.Message{ID: "k", Payload: []byte("body")}
	want, _ := idem.PayloadFingerprint(im)
	h := consume.DeadLetterHeaders(g, im, idem.Result{Key: idem.Key{Scope: "s", ID: "k"}}, errors.New("two\nlines"), "max_deliver")
	if h[idem.HeaderReason] != "max_deliver" || h[idem.HeaderError] != "two lines" || h[idem.HeaderFingerprint] != want ||
		h[idem.HeaderDeadLetterKey] != "s/k" {
		t.Fatalf("headers %v", h)
	}
	h = consume.DeadLetterHeaders(g, im, idem.Result{}, idem.Permanent(errors.New("no")), "")
	if h[idem.HeaderReason] != "permanent" {
		t.Fatalf("headers %v, want reason permanent", h)
	}
}

func TestIsDeadLetterHeader(t *testing.T) {
	h := consume.DeadLetterHeaders(guard(t, memory.New()), idem.Message{ID: "k", Payload: []byte("x")},
		idem.Result{Key: idem.Key{Scope: "s", ID: "k"}, Record: idem.Record{State: idem.StateCompleted, CreatedAt: time.Now()}},
		&idem.ConflictError{Fingerprint: "f"}, "")
	for name := range h {
		if !consume.IsDeadLetterHeader(name) || !consume.IsDeadLetterHeader(strings.ToLower(name)) {
			t.Errorf("%s is put on dead letters but not known as one of theirs", name)
		}
	}
	if consume.IsDeadLetterHeader("Idem-Id") || consume.IsDeadLetterHeader("tenant") {
		t.Error("a message's own header taken for a dead-letter header")
	}
}
