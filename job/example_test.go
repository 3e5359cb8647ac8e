package job_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/job"
	"github.com/idemgo/idem/store/memory"
)

// Two schedulers fire the same hourly tick: the report is built once, and
// the later trigger gets its recorded result.
func ExampleJob_Run() {
	store := memory.New() // in production, a shared store: store/postgres, store/redis, ...
	j, err := job.New(store, job.Options{Name: "hourly-report", Schedule: job.Every(time.Hour)})
	if err != nil {
		panic(err)
	}
	report := func(ctx context.Context, run *job.Run) ([]byte, error) {
		fmt.Println("building the report for", run.Window)
		return []byte("42 orders"), nil
	}
	tick := time.Date(2030, 1, 2, 15, 0, 0, 0, time.UTC)
	for _, fired := range []time.Time{tick, tick.Add(3 * time.Second)} { // the second scheduler fires late
		res, err := j.Run(context.Background(), fired, report)
		if errors.Is(err, idem.ErrInProgress) {
			continue // another instance is running this window
		}
		fmt.Println(res.Outcome, string(res.Value), err)
	}
	// Output:
	// building the report for 2030-01-02T15:00:00Z/2030-01-02T16:00:00Z
	// processed 42 orders <nil>
	// duplicate 42 orders <nil>
}

// A job in steps: the run that follows a failure skips the steps done and
// replays their results; each step has its own key for downstream calls.
func ExampleRun_Step() {
	j, err := job.New(memory.New(), job.Options{Name: "nightly-export", Schedule: job.Daily(time.UTC)})
	if err != nil {
		panic(err)
	}
	uploadFails := true
	export := func(ctx context.Context, run *job.Run) ([]byte, error) {
		file, err := run.Step(ctx, "extract", func(ctx context.Context) ([]byte, error) {
			fmt.Println("extracting")
			return []byte("export-2030-01-02.csv"), nil
		})
		if err != nil {
			return nil, err
		}
		_, err = run.Step(ctx, "upload", func(ctx context.Context) ([]byte, error) {
			fmt.Printf("uploading %s with key %.13s\n", file, idem.DeriveKey(ctx, "s3-put"))
			if uploadFails {
				uploadFails = false
				return nil, errors.New("503 slow down")
			}
			return nil, nil
		})
		return file, err
	}
	night := time.Date(2030, 1, 2, 1, 30, 0, 0, time.UTC)
	for range 3 {
		res, err := j.Run(context.Background(), night, export)
		fmt.Println(res.Outcome, err)
	}
	// Output:
	// extracting
	// uploading export-2030-01-02.csv with key idem-48ceae12
	// failed job "nightly-export", window 2030-01-02T00:00:00Z/2030-01-03T00:00:00Z, step "upload": 503 slow down
	// uploading export-2030-01-02.csv with key idem-48ceae12
	// processed <nil>
	// duplicate <nil>
}
