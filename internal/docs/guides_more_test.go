package docs

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/entity/entitypgx"
	"github.com/idemgo/idem/idemgrpc"
	"github.com/idemgo/idem/job"
	"github.com/idemgo/idem/load"
	"github.com/idemgo/idem/load/loadpgx"
)

// The blocks of docs/http-grpc.md and docs/jobs.md beyond services_test.go's.

type grpcAuth struct{}

func (grpcAuth) UserID(ctx context.Context) (string, error) { return "user-1", nil }

func docsGRPC(store idem.Store, authn grpc.UnaryServerInterceptor) (*grpc.Server, error) {
	auth := grpcAuth{}
	// block: grpc
	ids, err := idemgrpc.NewServer(store, idemgrpc.Options{
		Scope:     "payments",
		Principal: func(ctx context.Context) (string, error) { return auth.UserID(ctx) }, // keys are per caller
		Methods:   []string{"/payments.v1.Payments/Charge"},                              // or Match: func(m string) bool
	})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authn, ids.UnaryInterceptor())) // after authentication
	// block end
	return srv, nil
}

func buildReport(ctx context.Context, w job.Window) ([]byte, error) { return nil, nil }

func docsJob(ctx context.Context, store idem.Store, tick time.Time) error {
	// block: job
	j, err := job.New(store, job.Options{Name: "hourly-report", Schedule: job.Every(time.Hour)})
	if err != nil {
		return err
	}
	res, err := j.Run(ctx, tick, func(ctx context.Context, run *job.Run) ([]byte, error) {
		return buildReport(ctx, run.Window) // run.Step(ctx, "name", fn): steps a takeover resumes after
	})
	switch {
	case errors.Is(err, idem.ErrInProgress): // another instance is running this window: nothing to do
	case err != nil: // failed: the window is given back, the next trigger runs it again
	case res.Outcome == idem.OutcomeDuplicate: // done before; res.Value is its recorded result
	}
	// block end
	return err
}

func docsLoad(ctx context.Context, pool *pgxpool.Pool, f *os.File) (load.Summary, error) {
	// block: load
	orders := &loadpgx.Table{Name: "orders", KeyColumn: "order_id", FingerprintColumn: "load_fp",
		Columns: []string{"order_id", "customer", "amount_cents"}}
	l, err := load.New(entitypgx.NewStore(pool), orders, load.Options{Scope: "orders-import"})
	if err != nil {
		return load.Summary{}, err
	}
	src, err := load.NewCSV(f, load.CSVOptions{Key: []string{"order_id"}, Columns: orders.Columns})
	if err != nil {
		return load.Summary{}, err
	}
	return l.Run(ctx, src) // a reload writes nothing twice; a key with other content is a conflict, with its line
	// block end
}

var _ = []any{docsGRPC, docsJob, docsLoad}
