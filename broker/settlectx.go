package broker

import (
	"context"
	"time"

	"github.com/idemgo/idem/internal/lazyctx"
)

// newSettleCtx is the context of a broker action (an ack, a retry, a dead
// letter) starting now for a delivery whose context is parent:
// context.WithTimeout(context.WithoutCancel(parent), settleTimeout), made
// lazily (one allocation unless the transport waits on its Done). Cancel
// it when the action returns.
func newSettleCtx(parent context.Context) *lazyctx.Ctx {
	c := new(lazyctx.Ctx)
	c.Init(parent, time.Now().Add(settleTimeout), true)
	return c
}
