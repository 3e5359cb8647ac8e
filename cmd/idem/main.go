// Command idem is the command-line companion of the idem library.
//
//	idem demo                       watch at-least-once delivery break a naive consumer, and idem fix it
//	idem migrate  --store DSN       create or upgrade a store's schema
//	idem list     --store DSN       list records (filter by scope, state, staleness, age)
//	idem show     SCOPE KEY         show one record
//	idem resolve  SCOPE KEY         complete or release a parked or stale record
//	idem sweep                      delete expired records now
//	idem stats                      counts by scope and state
//	idem bench    --mode MODE       throughput and latency against the raw store
//
// Every store command takes --store DSN (or the IDEM_STORE environment
// variable): memory://[NAME], sqlite://PATH, postgres://USER@HOST:PORT/DB,
// mysql://USER@HOST:PORT/DB, redis://HOST:PORT, with the parameters
// ?table=, ?prefix=, ?partitions= and ?sync=; idem --help lists every form.
// Install it with go install github.com/idemgo/idem/cmd/idem@latest.
// Exit status: 0 ok, 1 failure, 2 usage error.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
