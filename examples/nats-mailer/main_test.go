package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	goredis "github.com/redis/go-redis/v9"

	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/internal/testenv"
)

// mailServer is the mail API: it deduplicates by Idempotency-Key, and it
// "loses" the first response for some recipients after sending, as a
// network failure would.
type mailServer struct {
	mu        sync.Mutex
	byKey     map[string]string // Idempotency-Key -> mail id
	sent      map[string]int    // recipient -> e-mails actually sent
	posts     int
	loseFirst map[string]bool
}

func (m *mailServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, err := idemhttp.ParseKey(r.Header.Get(idemhttp.HeaderKey))
	var mail struct{ To string }
	if err != nil || json.NewDecoder(r.Body).Decode(&mail) != nil {
		http.Error(w, "want an Idempotency-Key and a JSON body", http.StatusBadRequest)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.posts++
	id, seen := m.byKey[key]
	if !seen {
		id = fmt.Sprintf("mail-%d", len(m.byKey)+1)
		m.byKey[key] = id
		m.sent[mail.To]++
		if m.loseFirst[mail.To] {
			delete(m.loseFirst, mail.To)
			http.Error(w, "gateway timeout", http.StatusServiceUnavailable) // sent, but the client never learns
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q}`, id)
}

func TestRun(t *testing.T) {
	redisAddr := testenv.Redis.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("example-mailer-%d", time.Now().UnixNano())
	t.Cleanup(func() { deleteKeys(t, redisAddr, prefix) })

	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("embedded nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := setupJetStream(ctx, js) // run declares the same, idempotently
	if err != nil {
		t.Fatal(err)
	}

	api := &mailServer{byKey: map[string]string{}, sent: map[string]int{},
		loseFirst: map[string]bool{"bob@example.com": true, "dee@example.com": true}}
	apiSrv := httptest.NewServer(api)
	defer apiSrv.Close()

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, config{NATSURL: ns.ClientURL(), RedisAddr: redisAddr, RedisPrefix: prefix,
			MailAPI: apiSrv.URL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case err := <-done:
				t.Fatalf("run returned early: %v", err)
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(50 * time.Millisecond): // polling interval
			}
		}
	}
	settled := func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}

	users := []string{"ada", "bob", "cy", "dee", "eve"}
	for i, u := range users {
		if err := publishSignup(ctx, js, fmt.Sprintf("evt-%d", i+1), signup{Email: u + "@example.com", Name: u}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("the welcome e-mails", func() bool {
		api.mu.Lock()
		defer api.mu.Unlock()
		return len(api.sent) == len(users) && len(api.loseFirst) == 0
	})
	waitFor("every signup acknowledged", settled)

	// The accounts service re-sends events after a restart, past JetStream's
	// duplicate window (modelled by leaving out Nats-Msg-Id): the server
	// stores them again and only the guard recognises them. One re-send
	// reuses an event id with other content.
	resend(t, ctx, js, "evt-1", signup{Email: "ada@example.com", Name: "ada"})
	resend(t, ctx, js, "evt-3", signup{Email: "cy@example.com", Name: "cy"})
	resend(t, ctx, js, "evt-5", signup{Email: "mallory@example.com", Name: "eve"})
	dlq, err := js.Stream(ctx, stream+"_DLQ")
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the conflict dead-lettered", func() bool {
		info, err := dlq.Info(ctx)
		return err == nil && info.State.Msgs == 1
	})
	waitFor("every re-send acknowledged", settled)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}

	api.mu.Lock()
	defer api.mu.Unlock()
	for _, u := range users {
		if n := api.sent[u+"@example.com"]; n != 1 {
			t.Errorf("%s got %d welcome e-mails, want 1", u, n)
		}
	}
	if len(api.sent) != len(users) {
		t.Errorf("e-mails sent to %v, want only the five users", api.sent)
	}
	// Five calls, plus one repeat each for bob and dee whose first answer was
	// lost; the re-sent events never reached the API.
	if api.posts != len(users)+2 {
		t.Errorf("%d calls to the mail API, want %d", api.posts, len(users)+2)
	}
	m, err := dlq.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(natsidem.HeaderReason) != "conflict" || m.Header.Get("ce-id") != "evt-5" {
		t.Errorf("dead letter %s with headers %v, want the conflicting evt-5", m.Data, m.Header)
	}
}

// resend publishes a signup CloudEvent the way a producer outside the
// duplicate window delivers it: a new stream message with the same event id.
func resend(t *testing.T, ctx context.Context, js jetstream.JetStream, eventID string, s signup) {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Header.Set("ce-specversion", "1.0")
	msg.Header.Set("ce-id", eventID)
	msg.Header.Set("ce-source", "/accounts")
	msg.Header.Set("ce-type", "user.signed_up")
	msg.Data, _ = json.Marshal(s)
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatal(err)
	}
}

// deleteKeys removes the test's records from Redis.
func deleteKeys(t *testing.T, addr, prefix string) {
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Error(err)
	}
}
