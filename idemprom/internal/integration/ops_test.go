package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
	"github.com/idemgo/idem/idemprom"
	"github.com/idemgo/idem/idemprom/internal/idempromtest"
	"github.com/idemgo/idem/outbox"
	outboxmem "github.com/idemgo/idem/outbox/memory"
	"github.com/idemgo/idem/store/memory"
)

// The dashboard and the alert rules in ops/ read what the exporter serves:
// every metric they name is in a scrape, every alert has its section in
// ALERTS.md.

const (
	rulesFile     = "../../../ops/prometheus/idem-alerts.yml"
	dashboardFile = "../../../ops/grafana/idem-dashboard.json"
	alertsDoc     = "../../../ops/ALERTS.md"
)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type dashboard struct {
	Title  string `json:"title"`
	UID    string `json:"uid"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricName = regexp.MustCompile(`\bidem_[a-z_]+\b`)

// served returns the metric and label names a scrape has after traffic of
// every kind.
func served(t *testing.T) map[string]bool {
	t.Helper()
	now := time.Now()
	st := memory.New()
	ob, err := outboxmem.New(outboxmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.InTx(ctx, func(ctx context.Context, tx *outboxmem.Tx) error {
		return ob.Enqueue(ctx, tx, outbox.Message{ID: "m1", Destination: "orders", Payload: []byte("x")})
	}); err != nil {
		t.Fatal(err)
	}
	exp, err := idemprom.New(idemprom.Options{Store: st, Outbox: ob})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Shutdown(context.Background()) })
	idempromtest.Traffic(t, st, exp, now)
	exp.Observer().ObserveSweep(ctx, idem.Sweep{})
	// A renewal that fails gives idem_step_errors_total a sample.
	exp.Observer().ObserveStep(ctx, idem.Step{Key: idem.Key{Scope: "billing", ID: "x"}, Op: "renew", Err: errors.New("store down")})
	consumerReports(t, exp)
	names := map[string]bool{}
	for name, f := range idempromtest.Scrape(t, exp) {
		names[name] = true
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				names[l.GetName()] = true // the labels the queries group and filter by
			}
		}
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				names[name+s] = true
			}
		}
	}
	return names
}

// consumerReports feeds the exporter's observer a report of every kind
// the consumers' alerts read, as the consumer engine reports them.
func consumerReports(t *testing.T, exp *idemprom.Exporter) {
	t.Helper()
	obs := exp.Observer()
	ctx := context.Background()
	key := idem.Key{Scope: "billing", ID: "x"}
	obs.ObserveSettlement(ctx, idem.Settlement{Result: idem.Result{Outcome: idem.OutcomeInProgress, Key: key}, Err: idem.ErrInProgress, Action: idem.ActionRetry})
	dead := idem.Settlement{Result: idem.Result{Outcome: idem.OutcomeFailed, Key: key}, Action: idem.ActionDeadLetter, Reason: broker.ReasonMaxDeliver, DeadLettered: true}
	obs.ObserveSettlement(ctx, dead)
	dead.DeadLettered, dead.BrokerErr = false, errors.New("dead-letter queue full")
	obs.ObserveSettlement(ctx, dead)
	obs.ObserveOutage(ctx, idem.Outage{Scope: "billing", Err: errors.New("connection refused"), Held: 2})
	obs.ObserveError(ctx, idem.HandledError{Component: "broker", Scope: "billing", Err: errors.New("fetch: timeout")})
}

func TestAlertRules(t *testing.T) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	doc, err := os.ReadFile(alertsDoc)
	if err != nil {
		t.Fatal(err)
	}
	names := served(t)
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			seen[r.Alert] = true
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("rule %q lacks a name, expr, severity, summary or description", r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("rule %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			for _, m := range metricName.FindAllString(r.Expr, -1) {
				if !names[m] {
					t.Errorf("rule %s reads %s, which the exporter does not serve", r.Alert, m)
				}
			}
			if !strings.Contains(string(doc), "\n## "+r.Alert+"\n") {
				t.Errorf("%s has no section for %s", alertsDoc, r.Alert)
			}
			if want := "ops/ALERTS.md#" + strings.ToLower(r.Alert); r.Annotations["runbook"] != want {
				t.Errorf("rule %s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
			}
		}
	}
	for _, want := range []string{"IdemDuplicateRateRising", "IdemConflict", "IdemStaleInProgress", "IdemSweepStalled", "IdemSweepLagging", "IdemOutboxLag",
		"IdemStoreOutage", "IdemDeadLettersGrowing", "IdemHeldTooLong"} {
		if !seen[want] {
			t.Errorf("no %s rule", want)
		}
	}
	promtool(t, rulesFile)
}

// consumerAlertTests are promtool unit tests of the consumers' alerts (and
// of IdemStaleInProgress): each fires on the series its concern leaves, for
// the labels it groups by, and not before its "for" or after the concern.
const consumerAlertTests = `
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # One consumer reports an outage every 10s for half an hour; another's
      # ended after 5 minutes.
      - series: 'idem_broker_store_outages_total{instance="a"}'
        values: '0+6x30'
      - series: 'idem_broker_store_outages_total{instance="b"}'
        values: '0+6x5 30x25'
      - series: 'idem_broker_dead_letters_total{idem_scope="billing",idem_reason="max_deliver",instance="a"}'
        values: '0 0 0 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1'
      - series: 'idem_broker_dead_letters_total{idem_scope="billing",idem_reason="conflict",instance="a"}'
        values: '0+1x30'
      - series: 'idem_broker_settles_total{idem_scope="billing",idem_action="retry",idem_outcome="in_progress",instance="a"}'
        values: '0+1x60'
      - series: 'idem_broker_settles_total{idem_scope="mailer",idem_action="ack",idem_outcome="processed",instance="a"}'
        values: '0+100x60'
      - series: 'idem_records_stale{idem_scope="billing",instance="a"}'
        values: '2x30'
    alert_rule_test:
      - {eval_time: 8m, alertname: IdemStoreOutage}
      - eval_time: 20m
        alertname: IdemStoreOutage
        exp_alerts: [{exp_labels: {severity: critical}}]
      - {eval_time: 2m, alertname: IdemDeadLettersGrowing}
      - eval_time: 10m
        alertname: IdemDeadLettersGrowing
        exp_alerts: [{exp_labels: {severity: warning, idem_scope: billing, idem_reason: max_deliver}}]
      - {eval_time: 25m, alertname: IdemDeadLettersGrowing}
      - {eval_time: 25m, alertname: IdemHeldTooLong}
      - eval_time: 45m
        alertname: IdemHeldTooLong
        exp_alerts: [{exp_labels: {severity: warning, idem_scope: billing}}]
      - {eval_time: 10m, alertname: IdemStaleInProgress}
      - eval_time: 20m
        alertname: IdemStaleInProgress
        exp_alerts: [{exp_labels: {severity: warning, idem_scope: billing}}]
`

// TestConsumerAlertsFire runs consumerAlertTests with promtool on the rules
// stripped of their annotations (their text is checked above; the tests
// check when the expressions fire).
func TestConsumerAlertsFire(t *testing.T) {
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian's prometheus package): the alerts' firing is not checked")
	}
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			delete(r.(map[string]any), "annotations")
		}
	}
	dir := t.TempDir()
	if b, err = yaml.Marshal(rules); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yml"), []byte("rule_files: [rules.yml]\n"+consumerAlertTests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "test", "rules", "tests.yml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	names := served(t)
	var exprs []string
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			for _, m := range metricName.FindAllString(tg.Expr, -1) {
				if !names[m] {
					t.Errorf("panel %q reads %s, which the exporter does not serve", p.Title, m)
				}
			}
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries", len(exprs))
	}
	// The queries are valid PromQL once Grafana's variables are replaced:
	// promtool checks them as recording rules.
	var sb strings.Builder
	sb.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	r := strings.NewReplacer("$__rate_interval", "5m", "$scope", ".*")
	for i, e := range exprs {
		q, _ := json.Marshal(r.Replace(e))
		sb.WriteString("      - record: dashboard:q" + strings.Repeat("x", i+1) + "\n        expr: " + string(q) + "\n")
	}
	p := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, p)
}

// promtool checks a rules file with Prometheus's own parser when promtool
// is installed (Debian's prometheus package); the checks above stand alone.
func promtool(t *testing.T, path string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Logf("promtool not installed: %s checked for names only", path)
		return
	}
	out, err := exec.Command(bin, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check rules %s: %v\n%s", path, err, out)
	}
}
