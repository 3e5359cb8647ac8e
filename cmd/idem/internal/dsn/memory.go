package dsn

import (
	"context"
	"net/url"
	"sync"

	"github.com/idemgo/idem/store/memory"
)

// Named memory stores live as long as the process, so the commands of one
// process (tests, an embedding program) can share memory://NAME.
var (
	memMu    sync.Mutex
	memNamed = map[string]*memory.Store{}
)

func init() { register("memory", openMemory) }

func openMemory(_ context.Context, u *url.URL, _ string) (*Handle, error) {
	name := u.Host + u.Path
	var s *memory.Store
	if name == "" {
		s = memory.New()
	} else {
		memMu.Lock()
		s = memNamed[name]
		if s == nil {
			s = memory.New()
			memNamed[name] = s
		}
		memMu.Unlock()
	}
	return &Handle{Store: s, Native: s}, nil
}
