package broker

import (
	"context"

	"github.com/idemgo/idem/internal/lazyctx"
)

// newSettleCtx is the context of a broker action (an ack, a retry, a dead
// letter) starting now for a delivery whose context is parent:
// context.WithTimeout(context.WithoutCancel(parent), settleTimeout), made
// lazily (one allocation unless the transport waits on its Done), its
// timeout counted from the transport's first question to it
// (lazyctx.InitTimeout: an ack that asks none reads no clock). Cancel it
// when the action returns.
func newSettleCtx(parent context.Context) *lazyctx.Ctx {
	c := new(lazyctx.Ctx)
	c.InitTimeout(parent, settleTimeout, true)
	return c
}
