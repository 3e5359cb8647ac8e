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
// variable): memory://, sqlite://PATH, postgres://..., mysql://...,
// redis://... as this build supports them. Exit status: 0 ok, 1 failure,
// 2 usage error.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
