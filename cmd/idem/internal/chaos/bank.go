package chaos

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"
)

// bankCall is one charge request to the bank.
type bankCall struct {
	Key   string `json:"key"` // the derived key the bank dedups by; "" applies every call
	Order Order  `json:"order"`
}

// bankState is what the bank tells the verdict: the calls it received per
// key (at least once) and the charges it applied after its own dedup by
// key (exactly once, if the consumer passed a stable key).
type bankState struct {
	Calls    map[string]int   `json:"calls"`
	Applied  []bankCall       `json:"applied"`
	Balances map[string]int64 `json:"balances"`
}

// bank is the downstream service of the two-phase consumers: a separate
// process, never killed, which dedups charges by the idempotency key it
// receives, as a payment provider does.
type bank struct {
	mu sync.Mutex
	st bankState
}

func (b *bank) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/charge":
		var c bankCall
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		k := c.Key
		if k == "" {
			k = "(none)"
		}
		b.st.Calls[k]++
		if c.Key == "" || b.st.Calls[k] == 1 {
			b.st.Applied = append(b.st.Applied, c)
			b.st.Balances[c.Order.Account] += c.Order.Amount
		}
		b.mu.Unlock()
	case "/state":
		b.mu.Lock()
		defer b.mu.Unlock()
		json.NewEncoder(w).Encode(b.st)
	case "/reset":
		b.mu.Lock()
		b.st = bankState{Calls: map[string]int{}, Balances: map[string]int64{}}
		b.mu.Unlock()
	default:
		http.NotFound(w, r)
	}
}

func runBank(ctx context.Context, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	b := &bank{st: bankState{Calls: map[string]int{}, Balances: map[string]int64{}}}
	srv := &http.Server{Handler: b}
	go func() { <-ctx.Done(); srv.Close() }()
	return srv.Serve(l)
}

// bankAddr is a free loopback address for the bank.
func bankAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}
