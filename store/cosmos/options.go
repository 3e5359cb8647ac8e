package cosmos

import (
	"fmt"
	"strings"

	"github.com/idemgo/idem"
)

// Defaults of Options.
const (
	DefaultDatabase  = "idem"
	DefaultContainer = "idem_records"
)

// ErrInvalidName reports a database or container name Cosmos DB would
// refuse. It wraps idem.ErrInvalidOptions.
var ErrInvalidName = fmt.Errorf("%w: cosmos: invalid name", idem.ErrInvalidOptions)

// Options configure a Store. The zero value works.
type Options struct {
	// Database and Container name where the records live (default
	// DefaultDatabase and DefaultContainer). Migrate creates them.
	Database  string
	Container string
	// BatchConcurrency bounds the creates a ClaimBatch has in flight at
	// once (default 16).
	BatchConcurrency int
}

func (o Options) withDefaults() Options {
	if o.Database == "" {
		o.Database = DefaultDatabase
	}
	if o.Container == "" {
		o.Container = DefaultContainer
	}
	if o.BatchConcurrency == 0 {
		o.BatchConcurrency = 16
	}
	return o
}

func (o Options) validate() error {
	if err := checkName("database", o.Database); err != nil {
		return err
	}
	if err := checkName("container", o.Container); err != nil {
		return err
	}
	if o.BatchConcurrency < 1 {
		return fmt.Errorf("%w: cosmos: BatchConcurrency %d is not positive", idem.ErrInvalidOptions, o.BatchConcurrency)
	}
	return nil
}

// maxNameLen is Cosmos DB's limit on resource ids.
const maxNameLen = 255

// checkName applies Cosmos DB's rules for a database or container id: not
// empty, at most 255 characters, none of / \ ? #, no trailing space.
func checkName(kind, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty %s name", ErrInvalidName, kind)
	case len(name) > maxNameLen:
		return fmt.Errorf("%w: %s %q is longer than %d bytes", ErrInvalidName, kind, name, maxNameLen)
	case strings.ContainsAny(name, `/\?#`):
		return fmt.Errorf("%w: %s %q has one of / \\ ? #", ErrInvalidName, kind, name)
	case strings.TrimRight(name, " ") != name:
		return fmt.Errorf("%w: %s %q ends with a space", ErrInvalidName, kind, name)
	}
	return nil
}
