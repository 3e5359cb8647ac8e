package mysql_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/mysql"
)

// A consumer that charges orders exactly once: the dedup marker and the
// charge commit in one transaction, so a redelivery is acknowledged and
// skipped.
func Example_inbox() {
	ctx := context.Background()
	s, err := mysql.Open("app:secret@tcp(127.0.0.1:3306)/app", mysql.Options{Table: "idem_records"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	g, err := idem.New(s, idem.Options{Scope: "billing"})
	if err != nil {
		log.Fatal(err)
	}

	msg := idem.Message{ID: "order-42", Payload: []byte(`{"amount":10}`)}
	res, err := idem.DoTx(ctx, g, msg, func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		_, err := tx.ExecContext(ctx, "INSERT INTO charges (order_id, amount) VALUES (?, ?)", msg.ID, 10)
		return []byte("charged"), err
	})
	switch idem.Decide(res, err) {
	case idem.ActionAck:
		// processed now, or a duplicate of an earlier delivery: ack
	case idem.ActionRetry:
		// store down, or in progress elsewhere: nak, the broker redelivers
	case idem.ActionDeadLetter:
		// same key with other content, or a permanent failure
	}
}

// A side effect outside the database (an e-mail): a leased, fenced two-phase
// record, with the sweeper keeping the table at the size of the retention
// window.
func Example_twoPhase() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the sweeper
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/app?interpolateParams=true")
	if err != nil {
		log.Fatal(err)
	}
	s, err := mysql.New(db, mysql.Options{})
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.New(s, idem.Options{Scope: "mailer"})
	if err != nil {
		log.Fatal(err)
	}
	go (&idem.Sweeper{Store: s}).Run(ctx) // one sweeps at a time across instances

	_, err = g.Do(ctx, idem.Message{ID: "welcome-7"}, func(ctx context.Context) ([]byte, error) {
		return nil, sendWelcome(ctx, idem.DeriveKey(ctx, "smtp"))
	})
	_ = err
}

func sendWelcome(context.Context, string) error { return nil }
