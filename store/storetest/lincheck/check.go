package lincheck

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/idemgo/idem"
)

// ErrCheckTimeout means the linearizability search did not finish within
// Options.CheckTimeout: the history is neither proven nor refuted.
var ErrCheckTimeout = errors.New("lincheck: the linearizability search did not finish in time")

// Violation is a history that no sequential run of the Store contract
// explains. Report shows, for each offending key, the longest prefix of its
// history that the model could explain, with the model's states, and the
// calls none of which could come next.
type Violation struct {
	Keys          []idem.Key
	Report        string
	HistoryFile   string // the offending keys' whole histories, as text ("" if not written)
	Visualization string // porcupine's HTML view of the first of them ("" if not written)
}

// Error is the report.
func (v *Violation) Error() string {
	var b strings.Builder
	b.WriteString("lincheck: history not linearizable for ")
	for i, k := range v.Keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k.String())
	}
	b.WriteString("\n")
	b.WriteString(v.Report)
	if v.HistoryFile != "" {
		fmt.Fprintf(&b, "whole history: %s\n", v.HistoryFile)
	}
	if v.Visualization != "" {
		fmt.Fprintf(&b, "visualization: %s\n", v.Visualization)
	}
	return b.String()
}

// Check checks the history against the model of the Store contract. It
// returns nil when the history is linearizable, a *Violation when it is not
// (writing the offending keys' histories and porcupine's visualization to
// files in Options.ReportDir), and ErrCheckTimeout when the
// search ran out of time.
func (h *History) Check() error {
	m := model(h.keys)
	switch porcupine.CheckOperationsTimeout(m, h.ops, h.opts.CheckTimeout) {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("%w (%v for %d operations)", ErrCheckTimeout, h.opts.CheckTimeout, len(h.ops))
	}
	// Check the keys one by one to find the offending ones and their
	// longest explained prefixes.
	v := &Violation{}
	var text strings.Builder
	var infos []porcupine.LinearizationInfo
	whole := m
	whole.Partition = nil
	for _, ops := range m.Partition(h.ops) {
		res, info := porcupine.CheckOperationsVerbose(whole, ops, h.opts.CheckTimeout)
		if res != porcupine.Illegal {
			continue
		}
		key := h.keys[ops[0].Input.(input).key]
		v.Keys = append(v.Keys, key)
		v.Report += h.explain(whole, key, ops, info)
		fmt.Fprintf(&text, "key %s: %d operations\n", key, len(ops))
		for _, op := range ops {
			text.WriteString(h.line(op) + "\n")
		}
		infos = append(infos, info)
	}
	if len(v.Keys) == 0 {
		// The partitioned search refuted what the searches per key could
		// not: impossible unless they timed out.
		return fmt.Errorf("%w (rechecking the keys one by one)", ErrCheckTimeout)
	}
	if f, err := os.CreateTemp(h.opts.ReportDir, "lincheck-*.txt"); err == nil {
		_, werr := f.WriteString(text.String())
		if f.Close() == nil && werr == nil {
			v.HistoryFile = f.Name()
		}
	}
	if f, err := os.CreateTemp(h.opts.ReportDir, "lincheck-*.html"); err == nil {
		f.Close()
		if porcupine.VisualizePath(whole, infos[0], f.Name()) == nil {
			v.Visualization = f.Name()
		}
	}
	return v
}

// line renders one operation: client, real call and return times (µs of
// the run), the call and the answer.
func (h *History) line(op porcupine.Operation) string {
	ret := "∞"
	if op.Return != 1<<63-1 {
		ret = fmt.Sprint(op.Return / 1e3)
	}
	in := op.Input.(input)
	return fmt.Sprintf("  c%d [%dµs, %sµs] %s → %s", op.ClientId, op.Call/1e3, ret, describeInput(in), describeOutput(in.kind, op.Output.(output)))
}

// tailShown is how many operations of the explained prefix a report shows.
const tailShown = 25

// explain renders the failure on one key: the end of the longest prefix the
// model explains, with the states it leaves, then the pending calls that
// could have come next, none of which the model accepts in any of those
// states.
func (h *History) explain(m porcupine.Model, key idem.Key, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []porcupine.Operation
	for _, p := range info.PartialLinearizationsOperations()[0] {
		if len(p) > len(longest) {
			longest = p
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "key %s: %d operations; the model explains at most %d of them in a row (client, real call and return times, call → answer; model state after it):\n",
		key, len(ops), len(longest))
	state := m.Init()
	done := map[int]bool{}
	for i, op := range longest {
		_, state = m.Step(state, op.Input, op.Output)
		done[op.Input.(input).id] = true
		if i >= len(longest)-tailShown {
			fmt.Fprintf(&b, "%s\n      state: %s\n", h.line(op), m.DescribeState(state))
		} else if i == 0 {
			fmt.Fprintf(&b, "  ... %d earlier operations\n", len(longest)-tailShown)
		}
	}
	// The calls that could come next: not yet explained, called before the
	// first of them returned.
	var rest []porcupine.Operation
	first := int64(1<<63 - 1)
	for _, op := range ops {
		if !done[op.Input.(input).id] {
			rest = append(rest, op)
			first = min(first, op.Return)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Call < rest[j].Call })
	b.WriteString("  none of these can come next:\n")
	for _, op := range rest {
		if op.Call > first {
			break
		}
		var want []string
		in := op.Input.(input)
		for _, s := range state.([]any) {
			r := s.(record)
			w, _ := apply(r, in)
			want = append(want, describeOutput(in.kind, w))
			if deletable(r, in, op.Output.(output)) {
				w, _ = apply(record{}, in)
				want = append(want, describeOutput(in.kind, w)+" (the expired record deleted)")
			}
		}
		fmt.Fprintf(&b, "%s\n      the model answers: %s\n", h.line(op), strings.Join(want, " or "))
	}
	return b.String()
}
