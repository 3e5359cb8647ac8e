package main

import (
	"maps"
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

// flatExceptions are the engine options (broker.Options' fields) an
// adapter's Options cannot have, with the reason its package doc gives.
var flatExceptions = map[string]map[string]string{
	"watermill": {
		"Concurrency":     "Watermill's router runs the handlers: how many at once is the router's",
		"ShutdownTimeout": "Watermill's router bounds its own shutdown (CloseTimeout)",
	},
}

// TestAdapterSurface: every broker adapter's API report has every name of
// adapterSurface, or an exception with a reason its package doc states;
// an exception for a name the adapter has is stale. Its Options declares
// the engine's options flat (the fields of broker.Options, same names and
// types, so that a literal is natsidem.Options{Concurrency: 8, ...} on
// every adapter), neither embeds broker.Options nor aliases it.
func TestAdapterSurface(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	engineFields, err := structFields(filepath.Join(root, "api", "idem.txt"), modulePrefix+"/broker", "Options[M any]")
	if err != nil {
		t.Fatal(err)
	}
	if len(engineFields) == 0 {
		t.Fatal("api/idem.txt lists no field of broker.Options")
	}
	checkFlatOptions := func(t *testing.T, name, report, doc string) {
		t.Helper()
		fields, err := structFields(report, modulePrefix+"/broker/"+name, "Options")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range slices.Sorted(maps.Keys(engineFields)) {
			want := engineFields[f]
			got, has := fields[f]
			why, excused := flatExceptions[name][f]
			switch {
			case has && excused:
				t.Errorf("broker/%s.Options has %s, but flatExceptions says it cannot (%s): remove the exception", name, f, why)
			case !has && !excused:
				t.Errorf("broker/%s.Options has no field %s: declare broker.Options' fields flat (%s %s), or list in flatExceptions why it cannot and say so in its package doc", name, f, f, want)
			case !has && !strings.Contains(doc, f):
				t.Errorf("broker/%s.Options has no %s (%s), but its package doc does not say so", name, f, why)
			case has && !sameEngineType(got, want):
				t.Errorf("broker/%s.Options.%s is %s, want broker.Options' %s", name, f, got, want)
			}
		}
		for f, typ := range fields {
			if strings.HasPrefix(f, "embedded ") && strings.Contains(typ, modulePrefix+"/broker.Options[") {
				t.Errorf("broker/%s.Options embeds broker.Options: declare its fields flat (a literal cannot set promoted fields)", name)
			}
		}
		aliases, err := reportLines(report, modulePrefix+"/broker/"+name, "type ")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range aliases {
			if strings.Contains(l, " = "+modulePrefix+"/broker.Options[") {
				t.Errorf("broker/%s aliases broker.Options (%s): a second way to write the engine's options; use the flat fields", name, l)
			}
		}
	}
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
			checkFlatOptions(t, name, r, string(doc))
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

// structFields are the fields of struct typ of package pkg in the API
// report at path, name to type; an embedded field is keyed "embedded
// <name>".
func structFields(path, pkg, typ string) (map[string]string, error) {
	lines, err := reportLines(path, pkg, "type "+typ+" struct, ")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range lines {
		field, embedded := strings.CutPrefix(l, "embedded ")
		name, ftype, _ := strings.Cut(field, " ")
		if embedded {
			name = "embedded " + name
		}
		out[name] = ftype
	}
	return out, nil
}

// reportLines are the lines of package pkg in the API report at path that
// start with prefix, prefix cut.
func reportLines(path, pkg, prefix string) ([]string, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, "pkg "+pkg+", "+prefix); ok {
			out = append(out, rest)
		}
	}
	return out, nil
}

// sameEngineType reports whether an adapter's field type is broker.Options'
// field type want with the message type M instantiated: Hooks[M] in
// package broker is broker.Hooks[<the adapter's message>].
func sameEngineType(got, want string) bool {
	got = strings.ReplaceAll(got, modulePrefix+"/broker.", "")
	before, after, generic := strings.Cut(want, "[M]")
	if !generic {
		return got == want
	}
	rest, ok := strings.CutPrefix(got, before+"[")
	if !ok {
		return false
	}
	arg, ok := strings.CutSuffix(rest, "]"+after)
	return ok && arg != ""
}
