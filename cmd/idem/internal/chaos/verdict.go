package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/store/postgres"
	redisidem "github.com/idemgo/idem/store/redis"
)

// setupStore makes one pass's tables afresh (the SQL stores) or empties the
// bank (Redis: the store's prefix is new for every pass).
func setupStore(ctx context.Context, cfg Config, e *env, t tables, prefix string) error {
	switch cfg.Store {
	case "redis":
		return bankGet(ctx, e.bankURL+"/reset", nil)
	case "mysql", "sqlite":
		return setupSQL(ctx, cfg.Store, e.store.URL(), t)
	}
	pool, err := pgxpool.New(ctx, e.store.URL())
	if err != nil {
		return err
	}
	defer pool.Close()
	stmts := []string{
		`drop table if exists ` + t.Charges + `, ` + t.Balances,
		`create table ` + t.Charges + ` (id bigserial primary key, order_id text not null, account text not null,
			amount bigint not null, pid int not null, at timestamptz not null default now())`,
		`create table ` + t.Balances + ` (account text primary key, balance bigint not null)`,
	}
	if t.Records != "" {
		stmts = append(stmts, `drop table if exists `+t.Records+`, `+t.Records+`_migrations`)
	}
	for _, s := range stmts {
		if _, err := pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("chaos: set up the tables: %w", err)
		}
	}
	if t.Records != "" {
		s, err := postgres.New(pool, postgres.Options{Table: t.Records})
		if err != nil {
			return err
		}
		return s.Migrate(ctx)
	}
	return nil
}

func bankGet(ctx context.Context, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("chaos: bank: %w", err)
	}
	defer resp.Body.Close()
	if into != nil {
		return json.NewDecoder(resp.Body).Decode(into)
	}
	return nil
}

// effects are what the consumers did, read from the business data.
type effects struct {
	charges  map[string][]Order // by order id
	balances map[string]int64
}

func readEffects(ctx context.Context, cfg Config, e *env, t tables, p *Pass) (*effects, error) {
	ef := &effects{charges: map[string][]Order{}, balances: map[string]int64{}}
	if cfg.Store == "redis" {
		var st bankState
		if err := bankGet(ctx, e.bankURL+"/state", &st); err != nil {
			return nil, err
		}
		for _, c := range st.Applied {
			ef.charges[c.Order.Order] = append(ef.charges[c.Order.Order], c.Order)
		}
		for _, n := range st.Calls {
			p.BankCalls += n
		}
		p.BankApplied = len(st.Applied)
		ef.balances = st.Balances
		return ef, nil
	}
	if cfg.Store == "mysql" || cfg.Store == "sqlite" {
		return ef, readSQL(ctx, e.store.URL(), t, ef)
	}
	pool, err := pgxpool.New(ctx, e.store.URL())
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `select order_id, account, amount from `+t.Charges)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var o Order
		if err := rows.Scan(&o.Order, &o.Account, &o.Amount); err != nil {
			return nil, err
		}
		ef.charges[o.Order] = append(ef.charges[o.Order], o)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = pool.Query(ctx, `select account, balance from `+t.Balances)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var a string
		var b int64
		if err := rows.Scan(&a, &b); err != nil {
			return nil, err
		}
		ef.balances[a] = b
	}
	return ef, rows.Err()
}

// deadLetter is one message of the dead-letter stream, queue or topic.
type deadLetter struct {
	id, reason string
	order      Order
	decodes    bool
}

func contains(os []Order, o Order) bool {
	for _, x := range os {
		if x == o {
			return true
		}
	}
	return false
}

// verdict reads the effects, the dead letters and the handler's injected
// failures (the files of failDir) and fills p's figures; for idem's pass
// each failure is a problem.
func verdict(ctx context.Context, cfg Config, e *env, b bus, plan *Plan, p *Pass, t tables, prefix, failDir string, naive bool) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ef, err := readEffects(ctx, cfg, e, t, p)
	if err != nil {
		return fmt.Errorf("chaos: read the effects: %w", err)
	}
	dls, err := b.deadLetters(ctx)
	if err != nil {
		return err
	}
	failed, err := readFailures(failDir)
	if err != nil {
		return fmt.Errorf("chaos: read the handler's failures: %w", err)
	}
	problem := judge(plan, ef, dls, failed, p, naive)
	if x, ok := b.(lostExplainer); ok && !naive && len(p.lost) > 0 {
		notes, err := x.explainLost(ctx, p.lost)
		if err != nil {
			notes = []string{fmt.Sprintf("the lost orders' stream messages: %v", err)}
		}
		// Every note to the logs; the verdict keeps a summary.
		os.WriteFile(filepath.Join(e.logs, "lost.txt"), []byte(strings.Join(notes, "\n")+"\n"), 0o644)
		given := 0
		for _, n := range notes {
			if strings.Contains(n, "advisory published") {
				given++
			}
		}
		// first, so the cap on the problems listed never hides it
		p.Problems = append([]string{fmt.Sprintf("%d of the %d lost orders' messages were given up on by JetStream (max-deliveries advisory) and not dead-lettered; details in %s",
			given, len(p.lost), filepath.Join(e.logs, "lost.txt"))}, p.Problems...)
	}
	if !naive {
		n, err := staleInProgress(ctx, cfg, e, t, prefix)
		if err != nil {
			return err
		}
		p.StaleInProgress = n
		if n > 0 {
			problem("%d in-progress records left past their lease", n)
		}
		if p.Doubles > 0 {
			problem("%d doubles", p.Doubles)
		}
		if p.Crashes > 0 {
			problem("%d consumers panicked (see the logs)", p.Crashes)
		}
	}
	return nil
}

// limitReasons are the dead-letter reasons of a message given up on at its
// delivery limit: idem's, and RabbitMQ's own (its dead-letter exchange).
var limitReasons = map[string]bool{"max_deliver": true, "delivery_limit": true}

// judge fills p's figures from the effects, the dead letters and how many
// times the handler failed each order, and returns the function that
// records a problem (a no-op for the naive pass). An order may end
// uncharged only dead-lettered, and dead-lettered for its delivery limit
// only if the handler failed it: a dead letter of an order the handler
// never failed (its deliveries spent by store outages, say) is a failure,
// and an order neither charged nor dead-lettered is lost.
func judge(plan *Plan, ef *effects, dls []deadLetter, failed map[string]int, p *Pass, naive bool) func(string, ...any) {
	p.DeadLettered = len(dls)
	p.FailedOrders = len(failed)
	p.lost = map[string]bool{}
	for _, n := range failed {
		p.HandlerFailures += n
	}
	dlOf := map[string][]deadLetter{}
	for _, d := range dls {
		dlOf[d.id] = append(dlOf[d.id], d)
	}
	problem := func(format string, args ...any) {
		if !naive && len(p.Problems) < 20 {
			p.Problems = append(p.Problems, fmt.Sprintf(format, args...))
		}
	}

	for id, contents := range plan.Contents {
		ch := ef.charges[id]
		per := map[Order]int{}
		for _, c := range ch {
			if !contains(contents, c) {
				problem("order %s charged with content it was never sent with: %+v", id, c)
			}
			per[c]++
		}
		for _, n := range per {
			p.Doubles += n - 1
		}
		if len(per) > 1 {
			p.ConflictsApplied++
		}
		if len(ch) == 1 {
			p.Applied++
		}
		if len(contents) > 1 && len(per) == 1 {
			// the content not charged must be dead-lettered as a conflict
			found := false
			for _, d := range dlOf[id] {
				if d.reason == "conflict" && contains(contents, d.order) && per[d.order] == 0 {
					found = true
				}
			}
			loserDL := false // dead-lettered for another reason: judged with the dead letters
			for _, d := range dlOf[id] {
				loserDL = loserDL || contains(contents, d.order) && per[d.order] == 0
			}
			switch {
			case found:
				p.ConflictsDL++
			case loserDL:
			case !naive:
				p.Lost++
				problem("order %s: reused with other content, and the content not charged is not dead-lettered", id)
			}
		}
		switch {
		case len(ch) > 0:
			if plan.Fails[id] == failAlways && !naive {
				problem("order %s, which the handler fails every time, was charged", id)
			}
		case failed[id] > 0 && hasReason(dlOf[id], limitReasons):
			p.FailedDL++
		case len(dlOf[id]) > 0:
			// in the dead letters, but not for the handler's failures:
			// judged with the dead letters below
		default:
			p.Lost++
			p.lost[id] = true
			problem("order %s: never charged, never dead-lettered", id)
		}
	}
	for id, reason := range plan.Poison {
		if len(ef.charges[id]) > 0 {
			p.PoisonApplied++
			problem("poison %s was charged", id)
		}
		if hasReason(dlOf[id], map[string]bool{reason: true}) {
			p.PoisonDL++
		} else if !naive {
			problem("poison %s is not dead-lettered with reason %s (dead letters: %v)", id, reason, reasons(dlOf[id]))
		}
	}
	for _, d := range dls {
		contents := plan.Contents[d.id]
		switch {
		case plan.Poison[d.id] == d.reason:
		case d.reason == "conflict" && len(contents) > 1 && contains(contents, d.order) && !contains(ef.charges[d.id], d.order):
		case failed[d.id] > 0 && limitReasons[d.reason]:
			// given up on after the handler's failures
		case len(contents) > 0 && failed[d.id] == 0:
			p.OtherDL++
			p.DLWithoutFailure++
			problem("order %s dead-lettered (%s), yet the handler never failed it", d.id, d.reason)
		default:
			p.OtherDL++
			problem("unexpected dead letter of %s with reason %q", d.id, d.reason)
		}
	}
	sums := map[string]int64{}
	for _, ch := range ef.charges {
		for _, c := range ch {
			sums[c.Account] += c.Amount
		}
	}
	for a := range merge(sums, ef.balances) {
		if sums[a] != ef.balances[a] {
			p.Unbalanced++
			problem("account %s: balance %d, charges sum to %d", a, ef.balances[a], sums[a])
		}
	}
	return problem
}

// hasReason reports whether one of ds has one of the reasons.
func hasReason(ds []deadLetter, reasons map[string]bool) bool {
	for _, d := range ds {
		if reasons[d.reason] {
			return true
		}
	}
	return false
}

func reasons(ds []deadLetter) []string {
	var r []string
	for _, d := range ds {
		r = append(r, d.reason)
	}
	return r
}

func merge(a, b map[string]int64) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// staleInProgress counts the records left in progress past their lease.
func staleInProgress(ctx context.Context, cfg Config, e *env, t tables, prefix string) (int, error) {
	switch cfg.Store {
	case "redis":
		opt, err := goredis.ParseURL(e.store.URL())
		if err != nil {
			return 0, err
		}
		rdb := goredis.NewClient(opt)
		defer rdb.Close()
		s, err := redisidem.New(rdb, redisidem.Options{Prefix: prefix})
		if err != nil {
			return 0, err
		}
		return countStale(ctx, s)
	case "mysql", "sqlite":
		h, err := dsn.Open(ctx, withTable(e.store.URL(), t.Records))
		if err != nil {
			return 0, err
		}
		defer h.Close()
		in, ok := h.Store.(idem.Inspector)
		if !ok {
			return 0, fmt.Errorf("chaos: the %s store lists no records", cfg.Store)
		}
		return countStale(ctx, in)
	}
	pool, err := pgxpool.New(ctx, e.store.URL())
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	s, err := postgres.New(pool, postgres.Options{Table: t.Records})
	if err != nil {
		return 0, err
	}
	return countStale(ctx, s)
}

func countStale(ctx context.Context, in idem.Inspector) (int, error) {
	n := 0
	f := idem.ListFilter{State: idem.StateInProgress, StaleAt: time.Now(), Limit: 500}
	for {
		recs, err := in.List(ctx, f)
		if err != nil {
			return 0, fmt.Errorf("chaos: list in-progress records: %w", err)
		}
		n += len(recs)
		if len(recs) < f.PageLimit() {
			return n, nil
		}
		f.After = recs[len(recs)-1].Cursor()
	}
}
