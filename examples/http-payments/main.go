// Command http-payments serves POST /payments behind the Idempotency-Key
// middleware, on the embedded SQLite store: a client that retries a payment
// gets the first response again instead of paying twice.
//
//	go run . -addr :8080 -db payments.db
//	curl -i -X POST localhost:8080/payments -H 'Authorization: Bearer alice' \
//	     -H 'Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"' -d '{"amount_cents":1500,"currency":"EUR"}'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemhttp"
	"github.com/idemgo/idem/store/sqlite"
)

type config struct {
	Addr   string // listen address
	DBPath string // SQLite file holding the idempotency records and the payments
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Addr, "addr", ":8080", "listen address")
	flag.StringVar(&cfg.DBPath, "db", "payments.db", "SQLite database file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}

// run serves until ctx ends, then lets requests in flight finish.
func run(ctx context.Context, cfg config) error {
	a, err := newApp(ctx, cfg)
	if err != nil {
		return err
	}
	defer a.Close()
	srv := &http.Server{Addr: cfg.Addr, Handler: a.Handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// app is the service: its store and its routes.
type app struct {
	store   *sqlite.Store
	Handler http.Handler
}

func newApp(ctx context.Context, cfg config) (*app, error) {
	store, err := sqlite.Open(cfg.DBPath, sqlite.Options{})
	if err != nil {
		return nil, err
	}
	a := &app{store: store}
	if err := a.migrate(ctx); err != nil {
		store.Close()
		return nil, err
	}
	mw, err := idemhttp.New(store, idemhttp.Options{
		Scope:     "payments",
		Principal: bearerUser, // keys are per caller: another user's key never replays your response
		Required:  true,       // a POST without Idempotency-Key is refused (400)
		// A request whose handler crashed is run again on the client's retry
		// (the middleware's default, said here): the charge below carries a
		// key derived with idem.DeriveKey, so the provider applies it once.
		Guard: idem.Options{Stale: idem.StaleRetake},
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.Wrap(http.HandlerFunc(a.createPayment)))
	a.Handler = mux
	return a, nil
}

func (a *app) Close() error { return a.store.Close() }

func (a *app) migrate(ctx context.Context) error {
	if err := a.store.Migrate(ctx); err != nil {
		return err
	}
	_, err := a.store.DB().ExecContext(ctx, `CREATE TABLE IF NOT EXISTS payments (
		id INTEGER PRIMARY KEY AUTOINCREMENT,
		request_key TEXT NOT NULL UNIQUE,
		user_id TEXT NOT NULL,
		amount_cents INTEGER NOT NULL,
		currency TEXT NOT NULL)`)
	return err
}

// bearerUser is TOY authentication: the bearer token is taken as the user
// id, unchecked. Use the identity your real authentication established.
func bearerUser(r *http.Request) (string, error) {
	user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || user == "" {
		return "", errors.New("no bearer token")
	}
	return user, nil
}

type payment struct {
	ID          int64  `json:"id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// createPayment runs once per (user, Idempotency-Key); the middleware
// replays its response to retries.
func (a *app) createPayment(w http.ResponseWriter, r *http.Request) {
	var p payment
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.AmountCents <= 0 || len(p.Currency) != 3 {
		http.Error(w, "want {\"amount_cents\": >0, \"currency\": \"EUR\"}", http.StatusBadRequest)
		return
	}
	user, _ := bearerUser(r) // the middleware has checked it
	// The row carries a key derived from the request's: if this process dies
	// before the response is recorded and the client's retry runs the
	// handler again, the conflict-free insert finds the first attempt's row.
	ctx := r.Context()
	key := idem.DeriveKey(ctx, "payment")
	db := a.store.DB()
	if _, err := db.ExecContext(ctx, `INSERT INTO payments (request_key, user_id, amount_cents, currency)
		VALUES (?, ?, ?, ?) ON CONFLICT (request_key) DO NOTHING`, key, user, p.AmountCents, p.Currency); err != nil {
		http.Error(w, "payment failed", http.StatusInternalServerError) // 5xx: the key is released, a retry runs again
		return
	}
	if err := db.QueryRowContext(ctx, `SELECT id, amount_cents, currency FROM payments WHERE request_key = ?`, key).
		Scan(&p.ID, &p.AmountCents, &p.Currency); err != nil {
		http.Error(w, "payment failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/payments/%d", p.ID))
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(p)
}
