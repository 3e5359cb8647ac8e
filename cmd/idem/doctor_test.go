package main

import (
	"context"
	"encoding/json"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
	"github.com/idemgo/idem/internal/testenv"
)

// doctorRun runs idem doctor --json and returns its exit status and
// findings.
func doctorRun(t *testing.T, args ...string) (int, []finding) {
	t.Helper()
	code, rep := doctorJSON(t, args...)
	return code, rep.Findings
}

// doctorJSON runs idem doctor --json and returns its exit status and
// report.
func doctorJSON(t *testing.T, args ...string) (int, doctorReport) {
	t.Helper()
	code, out, errs := runCmd(t, append([]string{"doctor", "--json"}, args...)...)
	var rep doctorReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("idem doctor %v: exit %d, not JSON: %v\n%s%s", args, code, err, out, errs)
	}
	return code, rep
}

// has reports whether a finding of check and level says every one of want.
func has(fs []finding, check, level string, want ...string) bool {
	for _, f := range fs {
		if f.Check != check || f.Level != level {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(f.Message, w)
		}
		if ok {
			return true
		}
	}
	return false
}

// Trap (a): the records table dropped, its migrations table left. The
// doctor names each missing object with the fix and exits 1; after
// idem migrate, it finds no trap.
func TestDoctorDroppedTable(t *testing.T) {
	d := operatorStores["sqlite"](t)
	if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	if code, fs := doctorRun(t, "--store", d); code != exitOK || !has(fs, "schema", levelOK) {
		t.Fatalf("doctor on a whole schema: exit %d %+v", code, fs)
	}
	h, err := dsn.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.SQL.Exec("DROP TABLE " + strings.TrimPrefix(h.Where, "table "))
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	code, fs := doctorRun(t, "--store", d)
	if code != exitFailure || !has(fs, "schema", levelTrap, "missing: table") || !has(fs, "schema", levelTrap, "missing: index") {
		t.Fatalf("doctor without the records table: exit %d, want 1 and a trap per missing object: %+v", code, fs)
	}
	for _, f := range fs {
		if f.Level == levelTrap && !strings.Contains(f.Fix, "idem migrate") {
			t.Errorf("trap %q: fix %q, want idem migrate", f.Message, f.Fix)
		}
	}
	code, out, _ := runCmd(t, "doctor", "--store", d)
	if code != exitFailure || !strings.Contains(out, "fix: idem migrate") || !strings.Contains(out, "traps found") {
		t.Errorf("doctor's text: exit %d\n%s", code, out)
	}
	if code, out, errs := runCmd(t, "migrate", "--store", d); code != exitOK {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	if code, fs := doctorRun(t, "--store", d); code != exitOK {
		t.Fatalf("doctor after migrate: exit %d %+v", code, fs)
	}
}

// Trap (b) on NATS: a dead-letter stream that keeps dead letters 10 days
// outlives the default 7-day retention (a trap, with the numbers and which
// retention); the consumer's budget (MaxDeliver 4 × AckWait 1h) does not;
// the consumed stream keeps messages for ever (a warning). With
// --retention 11 days: no trap.
func TestDoctorRetentionNATS(t *testing.T) {
	addr := testenv.NATS.Need(t)
	nc, err := nats.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stream := "IDEMDOC_" + tag()
	for name, age := range map[string]time.Duration{stream: 0, stream + "_DLQ": 240 * time.Hour} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name)}, Storage: jetstream.MemoryStorage, MaxAge: age}); err != nil {
			t.Fatal(err)
		}
		defer js.DeleteStream(ctx, name)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Hour, MaxDeliver: 4}); err != nil {
		t.Fatal(err)
	}
	broker := addr + "?" + url.Values{"stream": {stream}, "consumer": {"billing"}, "dlq": {stream + "_DLQ"}}.Encode()
	store := operatorStores["memory"](t)
	code, fs := doctorRun(t, "--store", store, "--broker", broker)
	if code != exitFailure || !has(fs, "retention", levelTrap, "dead-letter stream", "240h0m0s (10 days)", "7 days", "the guard's default") ||
		!has(fs, "retention", levelOK, "MaxDeliver 4 × AckWait 1h0m0s", "4h0m0s") || !has(fs, "retention", levelWarning, "stream "+stream+": MaxAge", "no limit") {
		t.Fatalf("doctor: exit %d %+v", code, fs)
	}
	code, fs = doctorRun(t, "--store", store, "--broker", broker, "--retention", "264h")
	if code != exitOK || !has(fs, "retention", levelOK, "dead-letter stream", "(--retention)") {
		t.Fatalf("doctor --retention 264h: exit %d %+v", code, fs)
	}
}

// Trap (b) on Kafka (kfake): a dead-letter topic with retention.ms of 14
// days outlives the default retention; the consumed topic's 1 day does not.
func TestDoctorRetentionKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for topic, ms := range map[string]string{"orders": "86400000", "orders.dlq": "1209600000"} {
		if _, err := adm.CreateTopic(context.Background(), 1, 1, map[string]*string{"retention.ms": &ms}, topic); err != nil {
			t.Fatal(err)
		}
	}
	code, fs := doctorRun(t, "--store", operatorStores["memory"](t), "--broker", "kafka://"+c.ListenAddrs()[0]+"?topic=orders&dlq=orders.dlq")
	if code != exitFailure || !has(fs, "retention", levelTrap, "dead-letter topic orders.dlq: retention.ms", "336h0m0s (14 days)") ||
		!has(fs, "retention", levelOK, "topic orders: retention.ms", "24h0m0s") {
		t.Fatalf("doctor: exit %d %+v", code, fs)
	}
}

// Where the broker does not tell (RabbitMQ over AMQP), the doctor says so
// and takes --redelivery-horizon: longer than the retention, a trap.
func TestDoctorRedeliveryHorizon(t *testing.T) {
	addr := testenv.RabbitMQ.Need(t)
	b := newAMQPDLQ(t)
	broker := b.url()
	store := operatorStores["memory"](t)
	code, fs := doctorRun(t, "--store", store, "--broker", broker, "--retention", "48h")
	if code != exitOK || !has(fs, "retention", levelNote, "not readable over AMQP", "--redelivery-horizon") {
		t.Fatalf("doctor on %s: exit %d %+v", addr, code, fs)
	}
	code, fs = doctorRun(t, "--store", store, "--broker", broker, "--retention", "48h", "--redelivery-horizon", "72h")
	if code != exitFailure || !has(fs, "retention", levelTrap, "--redelivery-horizon = 72h0m0s (3 days)", "48h0m0s (2 days) (--retention)") {
		t.Fatalf("doctor --redelivery-horizon 72h: exit %d %+v", code, fs)
	}
	if code, fs = doctorRun(t, "--store", store); code != exitOK || !has(fs, "retention", levelNote, "nothing to compare") {
		t.Fatalf("doctor without a broker: exit %d %+v", code, fs)
	}
}

// Other traps: an in-progress record whose lease ended two hours ago (its
// owner crashed; stale for longer than --stale-after), and a completed
// record expired two hours ago still stored (no sweeper). Each is a trap;
// after idem sweep and idem resolve, none is.
func TestDoctorStaleAndUnswept(t *testing.T) {
	d := operatorStores["memory"](t)
	h, err := dsn.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Now()
	stuck := idem.Key{Scope: "billing", ID: "crashed-order"}
	if _, err := h.Store.Claim(ctx, idem.ClaimRequest{Key: stuck, Fingerprint: "f1", Now: now.Add(-2 * time.Hour),
		LeaseUntil: now.Add(-2*time.Hour + 30*time.Second), ExpiresAt: now.Add(7 * 24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	old := idem.Key{Scope: "billing", ID: "old-order"}
	cl, err := h.Store.Claim(ctx, idem.ClaimRequest{Key: old, Fingerprint: "f2", Now: now.Add(-3 * time.Hour),
		LeaseUntil: now.Add(-3*time.Hour + 30*time.Second), ExpiresAt: now.Add(-2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Complete(ctx, idem.CompleteRequest{Key: old, Token: cl.Record.Token, Now: now.Add(-3 * time.Hour), ExpiresAt: now.Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	code, fs := doctorRun(t, "--store", d)
	if code != exitFailure || !has(fs, "stale", levelTrap, "1 in-progress records", "billing/crashed-order") ||
		!has(fs, "sweep", levelTrap, "1 records expired over 1h0m0s ago") {
		t.Fatalf("doctor: exit %d %+v", code, fs)
	}
	if code, fs := doctorRun(t, "--store", d, "--stale-after", "3h", "--sweep-lag", "3h"); code != exitOK {
		t.Fatalf("doctor with wider thresholds: exit %d %+v", code, fs)
	}
	if code, out, errs := runCmd(t, "sweep", "--store", d); code != exitOK {
		t.Fatalf("sweep: %d %s %s", code, out, errs)
	}
	if code, out, errs := runCmd(t, "resolve", "billing", "crashed-order", "--release", "--store", d); code != exitOK {
		t.Fatalf("resolve: %d %s %s", code, out, errs)
	}
	if code, fs := doctorRun(t, "--store", d); code != exitOK || !has(fs, "stale", levelOK) || !has(fs, "sweep", levelOK) {
		t.Fatalf("doctor after sweep and resolve: exit %d %+v", code, fs)
	}
}

// On Service Bus the entity's properties come from the administration
// API; servicebustest has none, so the doctor says what it could not read
// and how to pass it, and warns that dead letters never expire there.
func TestDoctorServiceBus(t *testing.T) {
	b := newServiceBusDLQ(t)
	code, fs := doctorRun(t, "--store", operatorStores["memory"](t), "--broker", b.url())
	if code != exitOK || !has(fs, "retention", levelNote, "administration API", "--redelivery-horizon") ||
		!has(fs, "retention", levelWarning, "orders/$DeadLetterQueue: dead letters never expire") {
		t.Fatalf("doctor: exit %d %+v", code, fs)
	}
}

// On every broker of the table, idem doctor --broker reads what bounds
// how long a dead letter waits (or says it cannot), and compares it with
// the retention: the finding each broker gives on its dead-letter entity.
func TestDoctorBrokers(t *testing.T) {
	want := map[string]struct{ level, says string }{
		"nats":        {levelOK, "dead-letter stream"},
		"amqp":        {levelNote, "not readable over AMQP"},
		"kafka":       {levelTrap, "dead-letter topic orders.dlq: retention.ms"},
		"servicebus":  {levelWarning, "$DeadLetterQueue: dead letters never expire"},
		"eventhubs":   {levelNote, "event hub orders-dlq: its retention (how long it keeps a dead letter for a replay) is not in the properties"},
		"redisstream": {levelWarning, "Redis keeps entries until trimmed"},
		"mqtt":        {levelWarning, "never expires"},
		"sqs":         {levelNote, "MessageRetentionPeriod"},
		"pubsub":      {levelTrap, "dead-letter subscription projects/" + psProject + "/subscriptions/orders-dlq-reader: message retention"},
	}
	eachBroker(t, func(t *testing.T, b dlqBroker) {
		w, ok := want[strings.Split(t.Name(), "/")[1]]
		if !ok {
			t.Fatalf("no finding expected of %s", t.Name())
		}
		code, fs := doctorRun(t, "--store", operatorStores["memory"](t), "--broker", b.url())
		if code == exitUsage || !has(fs, "retention", w.level, w.says) {
			t.Fatalf("doctor: exit %d, want a %s finding saying %q: %+v", code, w.level, w.says, fs)
		}
	})
}

// A skewed clock: this host's clock read 20 s ahead (a clock function,
// since the test cannot move the real one) is off the store server's by
// more than Lease/6 of the default lease, a trap; the real clock is not;
// with --lease 5m the same skew is within bound. SQLite has no server
// clock: a note.
func TestDoctorClockSkew(t *testing.T) {
	for _, name := range []string{"postgres", "redis", "mysql"} {
		t.Run(name, func(t *testing.T) {
			f := storeFlags{dsn: operatorStores[name](t)}
			ctx := context.Background()
			if h, err := f.open(ctx, false); err != nil {
				t.Fatal(err)
			} else if h.Migrate != nil {
				if err := h.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				h.Close()
			}
			ahead := func() time.Time { return time.Now().Add(20 * time.Second) }
			fs, err := doctor(ctx, &f, &brokerFlags{}, doctorOptions{now: ahead})
			if err != nil || !has(fs, "clock", levelTrap, "ahead of the store server's", "Lease/6 = 5s") {
				t.Fatalf("a clock 20s ahead: %v %+v", err, fs)
			}
			if fs, err = doctor(ctx, &f, &brokerFlags{}, doctorOptions{}); err != nil || !has(fs, "clock", levelOK) {
				t.Fatalf("the real clock: %v %+v", err, fs)
			}
			if fs, err = doctor(ctx, &f, &brokerFlags{}, doctorOptions{now: ahead, lease: 5 * time.Minute}); err != nil || !has(fs, "clock", levelOK, "Lease/6 = 50s") {
				t.Fatalf("a clock 20s ahead, a 5m lease: %v %+v", err, fs)
			}
		})
	}
	code, fs := doctorRun(t, "--store", operatorStores["sqlite"](t))
	if !has(fs, "clock", levelNote, "no server clock") {
		t.Fatalf("sqlite: exit %d %+v", code, fs)
	}
}

// A DSN without ?table= reads idem_records. The doctor names the table it
// examined (text and JSON) and never advises creating a second one: with no
// idem table in the database it advises migrate, naming the table that
// creates; with idem's records in billing_inbox it names that table and the
// DSN that reads it, and no migrate, whether the DSN names no table or a
// missing one; on that DSN it finds no trap.
func TestDoctorNamesTheTable(t *testing.T) {
	for name, empty := range map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return "sqlite://" + filepath.ToSlash(filepath.Join(t.TempDir(), "app.db")) },
		"postgres": emptyPostgresDatabase,
	} {
		t.Run(name, func(t *testing.T) {
			base := empty(t)
			code, rep := doctorJSON(t, "--store", base)
			migrate := "idem migrate --store '" + base + "'"
			if code != exitFailure || rep.Table != "idem_records" || rep.Store != base || !has(rep.Findings, "schema", levelTrap, "missing: table", "idem_records") ||
				!slices.ContainsFunc(rep.Findings, func(f finding) bool {
					return strings.Contains(f.Fix, migrate) && strings.Contains(f.Fix, "creates table idem_records")
				}) {
				t.Fatalf("doctor on a database without idem's tables: exit %d %+v; want a trap with the fix %s, naming idem_records", code, rep, migrate)
			}
			if _, out, _ := runCmd(t, "doctor", "--store", base); !strings.Contains(out, "Examined "+base+", table idem_records.") {
				t.Errorf("doctor's text does not name the table it examined:\n%s", out)
			}

			inbox := dsn.SetParam(base, "table", "billing_inbox")
			if code, out, errs := runCmd(t, "migrate", "--store", inbox); code != exitOK {
				t.Fatalf("migrate %s: %d %s %s", inbox, code, out, errs)
			}
			for _, d := range []string{base, dsn.SetParam(base, "table", "orders_inbox")} {
				code, rep := doctorJSON(t, "--store", d)
				if code != exitFailure || !has(rep.Findings, "schema", levelTrap, "billing_inbox") ||
					!slices.ContainsFunc(rep.Findings, func(f finding) bool { return strings.Contains(f.Fix, "--store '"+inbox+"'") }) {
					t.Errorf("doctor on %s: exit %d %+v; want a trap naming billing_inbox and --store '%s'", d, code, rep, inbox)
				}
				for _, f := range rep.Findings {
					if strings.Contains(f.Fix+f.Message, "idem migrate") {
						t.Errorf("doctor on %s advises creating a second table beside billing_inbox: %+v", d, f)
					}
				}
				if _, out, _ := runCmd(t, "doctor", "--store", d); strings.Contains(out, "idem migrate") || !strings.Contains(out, "table "+rep.Table+".") {
					t.Errorf("doctor's text on %s:\n%s", d, out)
				}
			}
			h, err := dsn.Open(context.Background(), dsn.SetParam(base, "table", "none_here"))
			if err != nil {
				t.Fatal(err)
			}
			tables, err := h.OtherTables(context.Background())
			h.Close()
			if err != nil || !slices.Equal(tables, []string{"billing_inbox"}) {
				t.Errorf("the database's idem tables after the doctor: %v %v, want billing_inbox alone", tables, err)
			}

			code, rep = doctorJSON(t, "--store", inbox)
			if code != exitOK || rep.Table != "billing_inbox" || !has(rep.Findings, "schema", levelOK, "table billing_inbox") {
				t.Errorf("doctor on %s: exit %d %+v", inbox, code, rep)
			}
		})
	}
}

// emptyPostgresDatabase creates a database of its own for the test (the
// shared one holds other tests' idem tables), dropped when the test ends,
// and returns its DSN.
func emptyPostgresDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	h, err := dsn.Open(ctx, testenv.Postgres.Need(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	db := uniqueName("idem_doctor")
	if _, err := h.PG.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h, err := dsn.Open(ctx, testenv.Postgres.Addr())
		if err != nil {
			t.Logf("drop database %s: %v", db, err)
			return
		}
		defer h.Close()
		if _, err := h.PG.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", db, err)
		}
	})
	u, err := url.Parse(testenv.Postgres.Addr())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}
