package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/idemprom"
)

// metricsServer serves idem's Prometheus endpoint at /metrics while a
// command runs (idem demo --metrics-addr).
type metricsServer struct {
	exp  *idemprom.Exporter
	srv  *http.Server
	addr string
	done chan error
}

// serveMetrics listens on addr and serves the endpoint of a new exporter,
// whose Observer the command gives its guards.
func serveMetrics(addr string) (*metricsServer, error) {
	exp, err := idemprom.New(idemprom.Options{})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usagef("--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", exp)
	m := &metricsServer{exp: exp, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr: ln.Addr().String(), done: make(chan error, 1)}
	go func() { m.done <- m.srv.Serve(ln) }()
	return m, nil
}

// Observer is the observer to give the guards.
func (m *metricsServer) Observer() idem.Observer { return m.exp.Observer() }

// URL is the endpoint's address.
func (m *metricsServer) URL() string { return "http://" + m.addr + "/metrics" }

// announce says where the metrics are.
func (m *metricsServer) announce(w io.Writer) {
	fmt.Fprintf(w, "idem: Prometheus metrics at %s while the demo runs\n", m.URL())
}

// Close stops serving.
func (m *metricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	if serr := <-m.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return errors.Join(err, m.exp.Shutdown(ctx))
}
