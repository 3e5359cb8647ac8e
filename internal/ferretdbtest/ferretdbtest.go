// Package ferretdbtest gives tests a server speaking the MongoDB wire
// protocol without one started by hand: FerretDB v1 over SQLite, embedded
// in the test process through FerretDB's ferretdb package (made for
// embedding), the way Kafka tests run on kfake.
//
// URI returns IDEM_MONGO_URL when it is set (a MongoDB replica set runs the
// transactional cases too; an unreachable one skips, or fails under
// IDEM_REQUIRE_SERVICES=1, as every server of internal/testenv does), and
// otherwise the embedded server's URI, starting it on first use: one server
// per test process, its SQLite files in a temporary directory that Stop
// removes. A test that runs other processes against the same server passes
// them the URI in IDEM_MONGO_URL.
package ferretdbtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"

	"github.com/idemgo/idem/internal/testenv"
)

var (
	mu       sync.Mutex
	uri      string
	startErr error
	stop     func()
)

// URI returns the address of a MongoDB-wire server for tb's test (see the
// package doc). A failure to start the embedded server fails tb.
func URI(tb testing.TB) string {
	tb.Helper()
	if os.Getenv(testenv.Mongo.Env) != "" {
		return testenv.Mongo.Need(tb)
	}
	u, err := start()
	if err != nil {
		tb.Fatalf("embedded FerretDB: %v", err)
	}
	return u
}

// Embedded reports whether URI serves the embedded server (IDEM_MONGO_URL
// unset): tests of MongoDB features FerretDB v1 lacks (transactions) skip
// on it with the reason.
func Embedded() bool { return os.Getenv(testenv.Mongo.Env) == "" }

func start() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if uri != "" || startErr != nil {
		return uri, startErr
	}
	dir, err := os.MkdirTemp("", "idem-ferretdb-")
	if err != nil {
		startErr = err
		return "", err
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Handler:   "sqlite",
		SQLiteURL: "file:" + dir + "/",
	})
	if err != nil {
		os.RemoveAll(dir)
		startErr = err
		return "", err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.Run(ctx)
	}()
	// MongoDBURI waits for the listener; Run ending first means it failed.
	got := make(chan string, 1)
	go func() { got <- f.MongoDBURI() }()
	select {
	case uri = <-got:
	case <-done:
		startErr = errors.New("FerretDB stopped before it listened")
	case <-time.After(30 * time.Second):
		startErr = errors.New("FerretDB did not listen within 30s")
	}
	if startErr != nil {
		cancel()
		os.RemoveAll(dir)
		return "", startErr
	}
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		os.RemoveAll(dir)
	}
	return uri, nil
}

// Stop stops the embedded server, if one was started, and removes its
// files. Call it from TestMain after m.Run.
func Stop() {
	mu.Lock()
	defer mu.Unlock()
	if stop != nil {
		stop()
		stop, uri = nil, ""
	}
}
