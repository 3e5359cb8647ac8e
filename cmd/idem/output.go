package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/cmd/idem/internal/dsn"
)

// printOut prints v as JSON or text as the --json flag says.
func printOut(c *cobra.Command, asJSON bool, v any, text string) error {
	if asJSON {
		return writeJSON(c.OutOrStdout(), v)
	}
	_, err := io.WriteString(c.OutOrStdout(), text)
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// recordJSON is a record as the commands print it.
type recordJSON struct {
	Scope       string     `json:"scope"`
	ID          string     `json:"id"`
	DisplayID   string     `json:"display_id,omitempty"`
	State       idem.State `json:"state"`
	Stale       bool       `json:"stale"`
	Expired     bool       `json:"expired"`
	Fingerprint string     `json:"fingerprint,omitempty"`
	Result      string     `json:"result,omitempty"`
	ResultB64   string     `json:"result_base64,omitempty"`
	Token       int64      `json:"token"`
	Attempts    int        `json:"attempts"`
	LeaseUntil  *time.Time `json:"lease_until,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	CreatedAt   *time.Time `json:"created_at,omitempty"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
}

func toJSON(r idem.Record, now time.Time) recordJSON {
	j := recordJSON{
		Scope: r.Scope, ID: r.ID, State: r.State, Stale: r.LeaseExpired(now), Expired: r.Expired(now),
		Fingerprint: r.Fingerprint, Token: r.Token, Attempts: r.Attempts,
		LeaseUntil: tptr(r.LeaseUntil), ExpiresAt: tptr(r.ExpiresAt), CreatedAt: tptr(r.CreatedAt), UpdatedAt: tptr(r.UpdatedAt),
	}
	if r.DisplayID != "" && r.DisplayID != r.ID {
		j.DisplayID = r.DisplayID
	}
	if len(r.Result) > 0 {
		if utf8.Valid(r.Result) {
			j.Result = string(r.Result)
		} else {
			j.ResultB64 = base64.StdEncoding.EncodeToString(r.Result)
		}
	}
	return j
}

func tptr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// stateLabel shows derived states an operator cares about.
func stateLabel(r idem.Record, now time.Time) string {
	s := string(r.State)
	switch {
	case r.Expired(now):
		s += " (expired)"
	case r.LeaseExpired(now):
		s += " (stale)"
	}
	return s
}

// ago renders how long ago t was, or in how long it is, compactly.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + short(-d)
	}
	return short(d) + " ago"
}

func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < 48*time.Hour:
		return d.Round(time.Second).String()
	}
	return fmt.Sprintf("%.1fd", d.Hours()/24)
}

func displayID(r idem.Record) string {
	id := r.Key().ID
	if len(id) > 60 {
		id = id[:57] + "..."
	}
	return id
}

// where names the store and, where it has one, the table or prefix read:
// an empty answer from the wrong table must say which table it was.
func where(h *dsn.Handle) string {
	if h.Where == "" {
		return h.Redacted
	}
	return h.Redacted + ", " + h.Where
}
