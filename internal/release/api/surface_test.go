package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// adapterSurface is what every broker adapter exports for the same ideas,
// so that a user who knows one adapter knows them all: a guard whose scope
// defaults to the consumer's identity, the two handler modes, the
// consumer and its one-call run, the guard's and the operator's views of
// a message, the replay of a dead letter, and a producer helper that sets
// the key (and the broker's dedup id where the broker has one). Each entry
// is a set of names, one of which must exist: the producer helper is named
// for the SDK's verb.
var adapterSurface = [][]string{
	{"NewGuard"}, {"Handle"}, {"HandleTx"}, {"NewConsumer"}, {"Consume"},
	{"MessageOf"}, {"DeadLetterOf"}, {"Replay"}, {"Publish", "Send"},
}

// surfaceExceptions are the names an adapter cannot have, with the reason
// its package doc gives.
var surfaceExceptions = map[string]map[string]string{
	"watermill": {
		"NewConsumer": "Watermill's router is the consumer: it subscribes and schedules the handler calls; New builds the middleware it runs",
		"Consume":     "Watermill's router runs the loop (router.Run), not the adapter",
	},
}

// adapters are the broker adapters there are; a new one is held to the
// surface by its report alone (every api/broker.<name>.txt but
// brokertest's).
var adapters = []string{"amqp", "eventhubs", "kafka", "mqtt", "nats", "pubsub", "redisstream", "servicebus", "sqs", "watermill"}

// TestAdapterSurface: every broker adapter's API report has every name of
// adapterSurface, or an exception with a reason its package doc states;
// an exception for a name the adapter has is stale.
func TestAdapterSurface(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	reports, err := filepath.Glob(filepath.Join(root, "api", "broker.*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, r := range reports {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(r), "broker."), ".txt")
		if name == "brokertest" || strings.Contains(name, ".") {
			continue // the conformance suite; a sub-package's own report
		}
		found = append(found, name)
		t.Run(name, func(t *testing.T) {
			funcs, err := reportFuncs(r, modulePrefix+"/broker/"+name)
			if err != nil {
				t.Fatal(err)
			}
			doc, err := os.ReadFile(filepath.Join(root, "broker", name, "doc.go"))
			if err != nil {
				t.Fatalf("no package doc: %v", err)
			}
			for _, names := range adapterSurface {
				has := slices.ContainsFunc(names, func(n string) bool { return funcs[n] })
				label := strings.Join(names, " or ")
				why, excused := surfaceExceptions[name][names[0]]
				switch {
				case has && excused:
					t.Errorf("broker/%s has %s, but surfaceExceptions says it cannot (%s): remove the exception", name, label, why)
				case !has && !excused:
					t.Errorf("broker/%s exports no %s: add it (a thin wrapper, as the other adapters have), or list in surfaceExceptions why it cannot exist and say so in its package doc", name, label)
				case !has && !strings.Contains(string(doc), names[0]):
					t.Errorf("broker/%s has no %s (%s), but its package doc does not say so", name, label, why)
				}
			}
		})
	}
	for _, a := range adapters {
		if !slices.Contains(found, a) {
			t.Errorf("no API report api/broker.%s.txt for the adapter broker/%s", a, a)
		}
	}
	for a := range surfaceExceptions {
		if !slices.Contains(found, a) {
			t.Errorf("surfaceExceptions names broker/%s, which has no API report", a)
		}
	}
}

// reportFunc is a function line of an API report: its package and name.
var reportFunc = regexp.MustCompile(`^pkg ([^,]+), func ([A-Za-z0-9_]+)[\[(]`)

// reportFuncs are the names of the functions of package pkg in the API
// report at path.
func reportFuncs(path, pkg string) (map[string]bool, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, l := range lines {
		if m := reportFunc.FindStringSubmatch(l); m != nil && m[1] == pkg {
			out[m[2]] = true
		}
	}
	return out, nil
}
