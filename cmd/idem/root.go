package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks a mistake in the command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// silentError carries an exit status whose explanation the command has
// already printed (the demo's invariant report).
type silentError struct{ code int }

func (e silentError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// run executes the command line args and returns the exit status. main calls
// it; tests call it in-process.
func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var se silentError
	if errors.As(err, &se) {
		return se.code
	}
	var ue usageError
	usage := errors.As(err, &ue) || isCobraUsage(err)
	fmt.Fprintf(stderr, "idem: %v\n", err)
	if usage {
		fmt.Fprintln(stderr, "Run 'idem --help' (or 'idem COMMAND --help') for usage.")
		return exitUsage
	}
	return exitFailure
}

// isCobraUsage recognises the command-line errors cobra reports itself.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least",
		"requires at most", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.HasPrefix(msg, p) || strings.Contains(msg, " "+p) {
			return true
		}
	}
	return false
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "idem",
		Short: "Make message consumers idempotent: demo, inspect and operate idem stores",
		Long: `idem is the command-line companion of the idem library, which turns a broker's
at-least-once delivery into effectively-once processing.

Start with the demo: it runs an embedded NATS JetStream broker and an embedded
store, injects crashes, lost acks and producer retries, and shows a naive
consumer double-charging while idem charges every order exactly once.

Store commands take --store DSN or the IDEM_STORE environment variable.` + "\n\n" + dsn.Forms,
		Example: `  idem demo
  idem demo --consumers 8 --crash-rate 0.2 --seed 42
  IDEM_STORE=sqlite://idem.db idem stats
  idem list --store postgres://localhost/app --state in_progress --stale`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newDemoCmd(), newMigrateCmd(), newListCmd(), newShowCmd(), newResolveCmd(),
		newSweepCmd(), newStatsCmd(), newBenchCmd(), newConsoleCmd(), newChaosCmd(), newOutboxCmd(), newDLQCmd(), newDoctorCmd())
	return root
}

// args wraps a cobra argument validator so its errors are usage errors.
func args(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, a []string) error {
		if err := v(c, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}
