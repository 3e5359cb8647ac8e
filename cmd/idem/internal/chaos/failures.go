package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Injected handler failures. The supervisor writes the plan's Fails to a
// pass's failure directory; the consumer's handler fails an order there
// (before it charges) while the order has fewer failure files than its
// plan says, creating one file per failure it returns. The files are made
// with O_EXCL, so the count holds across the consumer processes and their
// SIGKILLs, and they are what the verdict reads: the messages the handler
// failed, the only ones that may end dead-lettered for their failures.

const failPlanFile = "plan.json"

// errInjected is the handler failure the harness injects: a transient
// error, retried by the consumer (and counted toward its delivery limit).
var errInjected = errors.New("chaos: injected handler failure")

// writeFailPlan makes dir with the plan's failures in it.
func writeFailPlan(dir string, plan *Plan) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(plan.Fails)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, failPlanFile), b, 0o644)
}

// failer is a consumer's side of the injected failures.
type failer struct {
	dir   string
	fails map[string]int
}

func openFailer(dir string) (*failer, error) {
	if dir == "" {
		return &failer{}, nil
	}
	f := &failer{dir: dir}
	b, err := os.ReadFile(filepath.Join(dir, failPlanFile))
	if err != nil {
		return nil, err
	}
	return f, json.Unmarshal(b, &f.fails)
}

// fail returns errInjected, recorded, while order id has failures left.
func (f *failer) fail(id string) error {
	n, ok := f.fails[id]
	if !ok {
		return nil
	}
	for i := 1; n == failAlways || i <= n; i++ {
		file, err := os.OpenFile(filepath.Join(f.dir, id+"."+strconv.Itoa(i)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			// The record is the verdict's evidence: no failure without it.
			return nil
		}
		file.Close()
		return fmt.Errorf("%w: order %s, failure %d", errInjected, id, i)
	}
	return nil
}

// readFailures is how many times the handler failed each order, from the
// files of dir.
func readFailures(dir string) (map[string]int, error) {
	failed := map[string]int{}
	if dir == "" {
		return failed, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if id, _, ok := strings.Cut(e.Name(), "."); ok && e.Name() != failPlanFile {
			failed[id]++
		}
	}
	return failed, nil
}
