package integration_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/ferretdbtest"
	"github.com/idemgo/idem/internal/testenv"
	mongoidem "github.com/idemgo/idem/store/mongo"
)

// raceChildEnv makes the test binary a racer of TestTwoProcessRace: it
// runs TestTwoProcessRaceChild, which reads its plan on stdin.
const raceChildEnv = "IDEM_MONGO_RACE_CHILD"

// racePlan is what the parent tells each racing process.
type racePlan struct {
	Database, Collection string
	Name                 string    // the racer's name, its result
	Now                  time.Time // the claims' clock: stale, released and expired as of it
	Keys                 []raceKey
}

type raceKey struct {
	ID     string
	Kind   string // stale, released, expired, fresh
	Zombie int64  // the stale record's owner's token (stale keys)
}

// raceResult is one racer's report of one key.
type raceResult struct {
	ID       string
	Outcome  string
	Token    int64
	Complete string // the winner's Complete: "" (nil) or the error
	Zombie   string // the zombie's Complete (stale keys): "lease_lost", "" (applied) or the error
}

// TestTwoProcessRace: two OS processes (this test binary, run again as
// TestTwoProcessRaceChild) claim the same 256 keys of one collection at
// once, eight goroutines each: 64 stale (in progress, lease ended), 64
// released, 64 expired and 64 new keys. Every key has exactly one winner
// across both processes, whose token differs from the stale owner's, and
// whose completion lands; every completion by the stale owner (a zombie,
// tried by both processes after their claim) is refused with
// ErrLeaseLost; each record ends completed under the winner's token with
// the winner's result. On FerretDB v1, whose conditional writes are not
// atomic, this holds because every write of an existing record first
// takes its turn, a unique-index insert (turns.go); before, 43 of 64 stale
// keys had two winners.
func TestTwoProcessRace(t *testing.T) {
	if os.Getenv(raceChildEnv) != "" {
		t.Skip("a racer")
	}
	if raceDetector && ferretdbtest.Embedded() {
		// Under the race detector the embedded server in this process runs
		// several times slower: writes come later than turnAbandon after
		// their reads and SQLite answers busy, so racers fail with
		// retryable errors, and a turn can outlast turnStale (the residual
		// risk the package doc names). What this test shows is between
		// processes, not goroutines: .ci/run runs it without -race.
		t.Skip("runs without the race detector (go test -run TestTwoProcessRace ./store/mongo/internal/integration/; .ci/run does)")
	}
	c := newClient(t)
	ctx := context.Background()
	s := newStore(t, c, mongoidem.Options{})
	now := time.Now().Truncate(time.Millisecond)
	past := now.Add(-time.Hour)
	const perKind = 64
	plan := racePlan{Database: s.Database().Name(), Collection: s.Collection().Name(), Now: now}
	for _, kind := range []string{"stale", "released", "expired", "fresh"} {
		for i := range perKind {
			k := raceKey{ID: fmt.Sprintf("%s-%02d", kind, i), Kind: kind}
			key := idem.Key{Scope: "race", ID: k.ID}
			req := idem.ClaimRequest{Key: key, Fingerprint: "fp", Now: past,
				LeaseUntil: past.Add(time.Minute), ExpiresAt: now.Add(24 * time.Hour)}
			switch kind {
			case "fresh":
				plan.Keys = append(plan.Keys, k)
				continue
			case "expired":
				req.ExpiresAt = past.Add(time.Minute)
			}
			cl, err := s.Claim(ctx, req)
			if err != nil || cl.Outcome != idem.ClaimAcquired {
				t.Fatalf("setup %s: %v %v", k.ID, cl.Outcome, err)
			}
			switch kind {
			case "stale":
				k.Zombie = cl.Record.Token
			case "released":
				err = s.Release(ctx, idem.ReleaseRequest{Key: key, Token: cl.Record.Token, Now: past})
			case "expired":
				err = s.Complete(ctx, idem.CompleteRequest{Key: key, Token: cl.Record.Token, Result: []byte("old"),
					Now: past, ExpiresAt: past.Add(time.Minute)})
			}
			if err != nil {
				t.Fatalf("setup %s: %v", k.ID, err)
			}
			plan.Keys = append(plan.Keys, k)
		}
	}

	type racer struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		out    *bufio.Scanner
		stderr *testenv.SyncBuffer
	}
	racers := make([]*racer, 2)
	for i := range racers {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTwoProcessRaceChild$", "-test.count=1", "-test.v")
		// The racers talk to this process's server (the embedded one
		// included): its URI goes to them in IDEM_MONGO_URL.
		cmd.Env = append(os.Environ(), raceChildEnv+"=1", testenv.Mongo.Env+"="+ferretdbtest.URI(t))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		r := &racer{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout), stderr: &testenv.SyncBuffer{}}
		r.out.Buffer(nil, 1<<20)
		cmd.Stderr = r.stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		p := plan
		p.Name = "p" + strconv.Itoa(i)
		if err := json.NewEncoder(stdin).Encode(p); err != nil {
			t.Fatal(err)
		}
		racers[i] = r
	}
	// Both racers are connected and waiting: start them together.
	for i, r := range racers {
		if line, ok := nextLine(r.out, "ready"); !ok {
			t.Fatalf("racer %d did not get ready (%q): %s", i, line, r.stderr)
		}
	}
	for _, r := range racers {
		if _, err := io.WriteString(r.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	results := map[string][]raceResult{}
	for i, r := range racers {
		if line, ok := nextLine(r.out, "results"); !ok {
			t.Fatalf("racer %d failed (%q): %s", i, line, r.stderr)
		}
		for r.out.Scan() {
			var res raceResult
			if err := json.Unmarshal(r.out.Bytes(), &res); err != nil {
				continue // the test framework's own lines
			}
			res.Outcome = "p" + strconv.Itoa(i) + ":" + res.Outcome
			results[res.ID] = append(results[res.ID], res)
		}
		if err := r.cmd.Wait(); err != nil {
			t.Fatalf("racer %d: %v: %s", i, err, r.stderr)
		}
	}

	bad := map[string]int{}
	for _, k := range plan.Keys {
		rs := results[k.ID]
		if len(rs) != 2 {
			t.Fatalf("%s: %d reports; want one from each racer", k.ID, len(rs))
		}
		var winners []raceResult
		for _, r := range rs {
			if r.Outcome[3:] == "acquired" {
				winners = append(winners, r)
			}
			if k.Kind == "stale" && r.Zombie != "lease_lost" {
				bad[k.Kind+": zombie's completion not refused"]++
				t.Errorf("%s: the zombie's Complete in %s returned %q; want ErrLeaseLost", k.ID, r.Outcome[:2], r.Zombie)
			}
		}
		if len(winners) != 1 {
			bad[k.Kind+": winners != 1"]++
			t.Errorf("%s: %d winners (%+v); want exactly one", k.ID, len(winners), rs)
			continue
		}
		w := winners[0]
		if w.Token == k.Zombie || w.Token == 0 {
			t.Errorf("%s: the winner's token %d; want one of its own", k.ID, w.Token)
		}
		if w.Complete != "" {
			t.Errorf("%s: the winner's Complete: %s", k.ID, w.Complete)
		}
		r, err := s.Get(ctx, idem.Key{Scope: "race", ID: k.ID})
		if err != nil {
			t.Fatal(err)
		}
		if r.State != idem.StateCompleted || r.Token != w.Token || string(r.Result) != w.Outcome[:2] {
			t.Errorf("%s: record %s token %d result %q; want completed by the winner (%d, %s)", k.ID, r.State, r.Token, r.Result, w.Token, w.Outcome[:2])
		}
	}
	if len(bad) > 0 {
		t.Logf("keys failing, by kind: %v", bad)
	}
}

// TestTwoProcessRaceChild is one racer of TestTwoProcessRace (it skips
// unless run by it): it reads its plan, connects, says "ready", waits for
// "go", claims every key on eight goroutines, completes what it won, tries
// the stale owner's completion of every stale key, and prints a report
// per key.
func TestTwoProcessRaceChild(t *testing.T) {
	if os.Getenv(raceChildEnv) == "" {
		t.Skip("run by TestTwoProcessRace")
	}
	in := bufio.NewReader(os.Stdin)
	var plan racePlan
	if err := json.NewDecoder(in).Decode(&plan); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	ctx := context.Background()
	s, err := mongoidem.New(c.Database(plan.Database), mongoidem.Options{Collection: plan.Collection})
	if err != nil {
		t.Fatal(err)
	}
	// Warm the connections and the store's answer about the server, so
	// that both racers start claiming at once.
	if _, err := s.Get(ctx, idem.Key{Scope: "race", ID: "warm"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, idem.RenewRequest{Key: idem.Key{Scope: "race", ID: "warm"}, Token: 1, Now: plan.Now, LeaseUntil: plan.Now}); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatal(err)
	}
	fmt.Println("ready")
	for {
		line, err := in.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "go\n" {
			break
		}
	}
	results := make([]raceResult, len(plan.Keys))
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = raceOne(ctx, s, plan, plan.Keys[i])
			}
		}()
	}
	for i := range plan.Keys {
		next <- i
	}
	close(next)
	wg.Wait()
	fmt.Println("results")
	enc := json.NewEncoder(os.Stdout)
	for _, r := range results {
		_ = enc.Encode(r)
	}
}

// raceOne claims k as a racer does and reports what happened.
func raceOne(ctx context.Context, s *mongoidem.Store, plan racePlan, k raceKey) raceResult {
	key := idem.Key{Scope: "race", ID: k.ID}
	res := raceResult{ID: k.ID}
	cl, err := s.Claim(ctx, idem.ClaimRequest{Key: key, Fingerprint: "fp", Now: plan.Now,
		LeaseUntil: plan.Now.Add(time.Hour), ExpiresAt: plan.Now.Add(24 * time.Hour), TakeOverStale: true})
	if err != nil {
		res.Outcome = "error " + err.Error()
		return res
	}
	res.Outcome, res.Token = cl.Outcome.String(), cl.Record.Token
	if cl.Outcome == idem.ClaimAcquired {
		if err := completeRetrying(ctx, s, idem.CompleteRequest{Key: key, Token: cl.Record.Token, Result: []byte(plan.Name),
			Now: plan.Now, ExpiresAt: plan.Now.Add(24 * time.Hour)}); err != nil {
			res.Complete = err.Error()
		}
	}
	if k.Kind == "stale" {
		err := completeRetrying(ctx, s, idem.CompleteRequest{Key: key, Token: k.Zombie, Result: []byte("zombie"),
			Now: plan.Now, ExpiresAt: plan.Now.Add(24 * time.Hour)})
		switch {
		case errors.Is(err, idem.ErrLeaseLost):
			res.Zombie = "lease_lost"
		case err != nil:
			res.Zombie = err.Error()
		}
	}
	return res
}

// nextLine reads lines until want (true) or the end (false, the last line).
func nextLine(sc *bufio.Scanner, want string) (string, bool) {
	last := ""
	for sc.Scan() {
		last = sc.Text()
		if last == want {
			return last, true
		}
	}
	return last, false
}

// completeRetrying is Complete retried on an error that is neither
// success nor ErrLeaseLost, as a guard's caller would on redelivery: on a
// loaded machine (the race detector, the embedded server in the parent
// process) a write can come more than turnAbandon after its read, which the
// store refuses with a retryable error rather than risk a skipped turn.
func completeRetrying(ctx context.Context, s *mongoidem.Store, req idem.CompleteRequest) error {
	var err error
	for range 5 {
		err = s.Complete(ctx, req)
		if err == nil || errors.Is(err, idem.ErrLeaseLost) || ctx.Err() != nil {
			return err
		}
	}
	return err
}
