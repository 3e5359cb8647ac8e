package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	natsidem "github.com/idemgo/idem/broker/nats"
	"github.com/idemgo/idem/store/postgres"
	redisstore "github.com/idemgo/idem/store/redis"
)

// The consumers below are written as a user would write them from the
// package docs: a NATS JetStream consumer charging orders, with the dedup
// marker in the charge's PostgreSQL transaction, or two-phase on Redis with
// the charge a call to the bank carrying the derived key.

func connectNATS(url string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true), nats.ReconnectWait(100*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// durable finds the durable consumer, waiting out a broker restart.
func durable(ctx context.Context, js jetstream.JetStream, stream, name string) (jetstream.Consumer, error) {
	var err error
	for range 100 {
		var c jetstream.Consumer
		if c, err = js.Consumer(ctx, stream, name); err == nil {
			return c, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, err
}

func decode(data []byte) (Order, error) {
	var o Order
	if err := json.Unmarshal(data, &o); err != nil {
		return o, idem.Permanent(fmt.Errorf("undecodable order: %w", err))
	}
	if o.Order == "" || o.Account == "" {
		return o, idem.Permanent(fmt.Errorf("order without id or account"))
	}
	return o, nil
}

// charge writes the charge row and the balance update in tx.
func charge(ctx context.Context, tx pgx.Tx, t tables, o Order) error {
	if _, err := tx.Exec(ctx, `insert into `+t.Charges+` (order_id, account, amount, pid) values ($1, $2, $3, $4)`,
		o.Order, o.Account, o.Amount, os.Getpid()); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `insert into `+t.Balances+` (account, balance) values ($1, $2)
		on conflict (account) do update set balance = `+t.Balances+`.balance + excluded.balance`, o.Account, o.Amount)
	return err
}

func runConsumer(ctx context.Context, cfg childConfig) error {
	nc, js, err := connectNATS(cfg.BrokerURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	cons, err := durable(ctx, js, cfg.Stream, cfg.Durable)
	if err != nil {
		return err
	}
	kill := newKiller(cfg.KillAt, cfg.KillAfter)
	var pool *pgxpool.Pool
	var rdb *goredis.Client
	switch cfg.Store {
	case "postgres":
		if pool, err = pgxpool.New(ctx, cfg.StoreURL); err != nil {
			return err
		}
		defer pool.Close()
	case "redis":
		opt, err := goredis.ParseURL(cfg.StoreURL)
		if err != nil {
			return err
		}
		rdb = goredis.NewClient(opt)
		defer rdb.Close()
	default:
		return fmt.Errorf("unknown store %q", cfg.Store)
	}
	bank := &http.Client{Timeout: 5 * time.Second}
	if cfg.Naive {
		return runNaive(ctx, cons, cfg, pool, bank, kill)
	}

	var store idem.Store
	var h natsidem.Handler
	gopts := idem.Options{}
	switch cfg.Store {
	case "postgres":
		s, err := postgres.New(pool, postgres.Options{Table: cfg.Tables.Records})
		if err != nil {
			return err
		}
		store = s
		h = natsidem.HandleTx(func(ctx context.Context, tx pgx.Tx, msg jetstream.Msg) ([]byte, error) {
			o, err := decode(msg.Data())
			if err != nil {
				return nil, err
			}
			if err := charge(ctx, tx, cfg.Tables, o); err != nil {
				return nil, err
			}
			kill.pass(pointEffect) // written, not committed: the transaction dies with the process
			return nil, nil
		})
	case "redis":
		s, err := redisstore.New(rdb, redisstore.Options{Prefix: cfg.Prefix})
		if err != nil {
			return err
		}
		store = s
		gopts.Lease = cfg.Lease
		h = natsidem.Handle(func(ctx context.Context, msg jetstream.Msg) ([]byte, error) {
			o, err := decode(msg.Data())
			if err != nil {
				return nil, err
			}
			if err := callBank(ctx, bank, cfg.BankURL, idem.DeriveKey(ctx, "charge"), o); err != nil {
				return nil, err
			}
			kill.pass(pointEffect) // the bank has charged; the record is not completed
			return nil, nil
		})
	}
	g, err := natsidem.NewGuard(store, cons, gopts)
	if err != nil {
		return err
	}
	c, err := natsidem.NewConsumer(cons, g, h, natsidem.Options{
		JetStream: js, DeadLetterSubject: cfg.DLQSubject, Concurrency: cfg.Concurrency,
		Backoff: idem.ExponentialBackoff(100*time.Millisecond, 2*time.Second),
		Hooks: broker.Hooks[jetstream.Msg]{
			BeforeSettle: func(ctx context.Context, msg jetstream.Msg, r broker.Report) {
				if r.Action == idem.ActionAck && r.Result.Outcome == idem.OutcomeProcessed {
					kill.pass(pointSettle) // committed (completed), not acked
				}
			},
		},
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// callBank asks the bank to charge o under key ("" for the naive consumer,
// which has no key to give).
func callBank(ctx context.Context, c *http.Client, url, key string, o Order) error {
	body, _ := json.Marshal(bankCall{Key: key, Order: o})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/charge", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bank: %s", resp.Status)
	}
	return nil
}

// runNaive is the same consumer without idem: charge, commit (or call the
// bank), ack. It double-charges every redelivery and producer retry.
func runNaive(ctx context.Context, cons jetstream.Consumer, cfg childConfig, pool *pgxpool.Pool, bank *http.Client, kill *killer) error {
	work := make(chan jetstream.Msg)
	for range max(cfg.Concurrency, 1) {
		go func() {
			for msg := range work {
				o, err := decode(msg.Data())
				if err != nil {
					msg.Term()
					continue
				}
				if pool != nil {
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						if err := charge(ctx, tx, cfg.Tables, o); err != nil {
							return err
						}
						kill.pass(pointEffect)
						return nil
					})
				} else {
					err = callBank(ctx, bank, cfg.BankURL, "", o)
					kill.pass(pointEffect)
				}
				if err != nil {
					msg.NakWithDelay(200 * time.Millisecond)
					continue
				}
				kill.pass(pointSettle)
				msg.Ack()
			}
		}()
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) { work <- msg }, jetstream.PullMaxMessages(2*max(cfg.Concurrency, 1)))
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Stop()
	return ctx.Err()
}
