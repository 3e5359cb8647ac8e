// Command nats-mailer sends a welcome e-mail for every signup event on NATS
// JetStream, once, through a mail API outside any database. A two-phase guard
// on Redis skips events already handled; the API call carries a key derived
// from the event's, so a call repeated after a lost response is deduplicated
// by the mail API too.
//
//	NATS_URL=nats://localhost:4222 REDIS_ADDR=localhost:6379 MAIL_API=http://localhost:8025 go run .
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/idemhttp"
	redisidem "github.com/idemgo/idem/store/redis"
)

type config struct {
	NATSURL     string
	RedisAddr   string
	RedisPrefix string // keys of the idem records in Redis
	MailAPI     string // base URL of the mail service
	Logger      *slog.Logger
}

const (
	stream     = "SIGNUPS"
	subject    = "accounts.signed_up"
	durable    = "mailer" // the consumer identity: the guard's scope is "SIGNUPS/mailer"
	deadLetter = "mailer.dlq"
)

// signup is the event the accounts service publishes, as a CloudEvent.
type signup struct {
	Email string `json:"email"`
	Name  string `json:"name"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := config{
		NATSURL:     getenv("NATS_URL", nats.DefaultURL),
		RedisAddr:   getenv("REDIS_ADDR", "127.0.0.1:6379"),
		RedisPrefix: "idem",
		MailAPI:     getenv("MAIL_API", "http://127.0.0.1:8025"),
		Logger:      slog.Default(),
	}
	if err := run(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}

// run consumes signups until ctx ends.
func run(ctx context.Context, cfg config) error {
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("mailer"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := setupJetStream(ctx, js)
	if err != nil {
		return err
	}

	rdb := goredis.NewClient(&goredis.Options{Addr: cfg.RedisAddr})
	defer rdb.Close()
	store, err := redisidem.New(rdb, redisidem.Options{Prefix: cfg.RedisPrefix})
	if err != nil {
		return err
	}
	g, err := natsidem.NewGuard(store, cons, idem.Options{
		Key:   idem.CloudEventsKey, // the event's source and id, the same on every re-send
		Lease: 30 * time.Second,    // renewed while the handler runs
		// A consumer that crashed mid-send left its claim in progress: run
		// the send again rather than park it for an operator, because the
		// mail API deduplicates on the derived key every send carries.
		Stale:    idem.StaleRetake,
		Observer: idem.NewSlogObserver(cfg.Logger),
	})
	if err != nil {
		return err
	}

	// Every POST made while an event is handled carries Idempotency-Key:
	// idem.DeriveKey(ctx, "send"), stable across redeliveries of the event.
	api := &mailAPI{base: cfg.MailAPI, client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &idemhttp.Transport{Name: func(*http.Request) string { return "send" }},
	}}
	return natsidem.Consume(ctx, cons, g, natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
		var s signup
		if err := json.Unmarshal(msg.Data(), &s); err != nil || s.Email == "" {
			return nil, idem.Permanent(fmt.Errorf("bad signup event: %q", msg.Data()))
		}
		id, err := api.send(ctx, s.Email, "Welcome, "+s.Name)
		return []byte(id), err // the mail id is recorded and replayed to duplicates
	}), natsidem.Options{Concurrency: 4, JetStream: js, DeadLetterSubject: deadLetter})
}

// setupJetStream declares the signup stream, a stream keeping dead letters,
// and the durable consumer.
func setupJetStream(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}}); err != nil {
		return nil, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: stream + "_DLQ", Subjects: []string{deadLetter}}); err != nil {
		return nil, err
	}
	return js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
	})
}

// mailAPI is a client of the mail service.
type mailAPI struct {
	base   string
	client *http.Client
}

// send asks the mail service to send one e-mail and returns its id.
func (m *mailAPI) send(ctx context.Context, to, subject string) (string, error) {
	body, err := json.Marshal(map[string]string{"to": to, "subject": subject})
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.client.Do(req)
	if err != nil {
		return "", err // retried: the repeat carries the same key
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusTooManyRequests:
		return "", fmt.Errorf("mail API: %s", resp.Status)
	case resp.StatusCode >= 300:
		return "", idem.Permanent(fmt.Errorf("mail API: %s", resp.Status))
	}
	var sent struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sent); err != nil {
		return "", fmt.Errorf("mail API answer: %w", err)
	}
	return sent.ID, nil
}

// publishSignup is the producer's side: a CloudEvent whose id is also the
// Nats-Msg-Id, so JetStream drops a re-send within its duplicate window
// and the mailer's guard any later one.
func publishSignup(ctx context.Context, js jetstream.JetStream, eventID string, s signup) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = natsidem.Publish(ctx, js, subject, eventID, data,
		natsidem.WithCloudEvent("/accounts", "user.signed_up"), natsidem.WithContentType("application/json"))
	return err
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
