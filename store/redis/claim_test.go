package redisidem_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
)

// commandLog records the commands a client sends, as "set", "set+get"
// (SET with GET) or "evalsha", leaving out connection handshakes.
type commandLog struct {
	mu   sync.Mutex
	cmds []string
}

func (l *commandLog) DialHook(next goredis.DialHook) goredis.DialHook { return next }
func (l *commandLog) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		name := cmd.Name()
		if name == "hello" || name == "client" || name == "ping" {
			return next(ctx, cmd) // a connection's handshake
		}
		if name == "set" {
			for _, a := range cmd.Args() {
				if s, ok := a.(string); ok && strings.EqualFold(s, "get") {
					name = "set+get"
				}
			}
		}
		l.mu.Lock()
		l.cmds = append(l.cmds, name)
		l.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (l *commandLog) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// take returns the commands logged since the last take.
func (l *commandLog) take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.Join(l.cmds, ",")
	l.cmds = nil
	return s
}

// New keys are claimed by a SET NX whose reply is OK; the first existing
// key sends the claim through the script, and the claims after it read the
// record in the SET itself (SET NX GET) until a run of new keys turns that
// off again. The outcomes are the same on both paths.
func TestClaimReadsExistingKeysInOneCommandAfterADuplicate(t *testing.T) {
	c := newClient(t)
	log := &commandLog{}
	c.AddHook(log)
	s := newStore(t, c)
	ctx := context.Background()
	now := time.Now()
	claim := func(id string) idem.ClaimOutcome {
		t.Helper()
		cl, err := s.Claim(ctx, idem.ClaimRequest{Key: idem.Key{Scope: "s", ID: id}, Fingerprint: "fp",
			Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return cl.Outcome
	}
	steps := []struct {
		id   string
		want idem.ClaimOutcome
		cmds string
	}{
		{"a", idem.ClaimAcquired, "set"},
		{"a", idem.ClaimInProgress, "set,evalsha"},
		{"a", idem.ClaimInProgress, "set+get"},
		{"b", idem.ClaimAcquired, "set+get"},
	}
	for i, st := range steps {
		if got := claim(st.id); got != st.want {
			t.Fatalf("step %d: claim %s = %v, want %v", i, st.id, got, st.want)
		}
		if cmds := log.take(); cmds != st.cmds {
			t.Fatalf("step %d: claim %s sent %q, want %q", i, st.id, cmds, st.cmds)
		}
	}
	// A run of new keys ends the GET mode.
	for i := range 100 {
		if got := claim(fmt.Sprintf("new-%d", i)); got != idem.ClaimAcquired {
			t.Fatalf("new-%d = %v", i, got)
		}
	}
	log.take()
	if got := claim("c"); got != idem.ClaimAcquired {
		t.Fatalf("c = %v", got)
	}
	if cmds := log.take(); cmds != "set" {
		t.Fatalf("a new key after a run of new keys sent %q, want %q", cmds, "set")
	}
}
