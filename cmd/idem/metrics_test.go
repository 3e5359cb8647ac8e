package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idemgo/idem/cmd/idem/internal/demo"
)

// TestDemoMetrics runs the demo with --metrics-addr's endpoint and scrapes
// it when the run is over: the duplicates and conflicts Prometheus reads
// are those the demo reports it met.
func TestDemoMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo")
	}
	m, err := serveMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rep, err := demo.Run(context.Background(), demo.Config{Orders: 300, Consumers: 3, DupRate: 0.3, ConflictRate: 0.02, Seed: 21, Observer: m.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.InvariantOK {
		t.Fatalf("the demo's invariant failed: %v", rep.Offending)
	}
	if rep.DuplicatesSuppressed == 0 || rep.ConflictDeadLetters == 0 {
		t.Fatalf("the run injected no duplicates (%d) or conflicts (%d): the check below would prove nothing", rep.DuplicatesSuppressed, rep.ConflictDeadLetters)
	}
	resp, err := http.Get(m.URL())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}
	count := func(outcome string) int64 {
		var n float64
		for _, mt := range fams["idem_messages_total"].GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "idem_outcome" && l.GetValue() == outcome {
					n += mt.GetCounter().GetValue()
				}
			}
			for _, l := range mt.GetLabel() {
				if l.GetName() == "idem_scope" && l.GetValue() != rep.Scope {
					t.Errorf("a sample of scope %q, not the run's %q", l.GetValue(), rep.Scope)
				}
			}
		}
		return int64(n)
	}
	if got := count("duplicate"); got != rep.DuplicatesSuppressed {
		t.Errorf("idem_messages_total{idem_outcome=\"duplicate\"} = %d, the demo suppressed %d duplicates", got, rep.DuplicatesSuppressed)
	}
	if got := count("conflict"); got != int64(rep.ConflictDeadLetters) {
		t.Errorf("idem_messages_total{idem_outcome=\"conflict\"} = %d, the demo dead-lettered %d conflicting messages", got, rep.ConflictDeadLetters)
	}
	if !strings.Contains(string(body), "idem_claim_duration_seconds_bucket") {
		t.Error("no claim latency histogram")
	}
	t.Logf("duplicates %d, conflicts %d (%d ids), published %d", rep.DuplicatesSuppressed, rep.ConflictDeadLetters, rep.Conflicts, rep.Published)
}
