package brokertest

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"github.com/idemgo/idem"
)

// refusing is a store the cases switch off: while down, every call fails
// as a store that refuses connections does (a PostgreSQL being restarted),
// with a non-data error that is not the message's fault. Claims of the key
// ID invalidID fail with the store's refusal of the data instead, which is
// the message's fault (idem.ErrInvalidData).
type refusing struct {
	idem.Store
	down      atomic.Bool
	refusals  atomic.Int64 // calls refused while down
	invalidID string
}

// errRefused is what a refusing store returns while down.
var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

// errBadData is the store's refusal of a message's data.
var errBadData = errors.New("value too long for type character varying(64)")

func (s *refusing) refused() error {
	if s.down.Load() {
		s.refusals.Add(1)
		return errRefused
	}
	return nil
}

func (s *refusing) Claim(ctx context.Context, req idem.ClaimRequest) (idem.Claim, error) {
	if err := s.refused(); err != nil {
		return idem.Claim{}, err
	}
	if s.invalidID != "" && req.Key.ID == s.invalidID {
		return idem.Claim{}, &idem.InvalidDataError{Op: "claim", Err: errBadData}
	}
	return s.Store.Claim(ctx, req)
}

func (s *refusing) Complete(ctx context.Context, req idem.CompleteRequest) error {
	if err := s.refused(); err != nil {
		return err
	}
	return s.Store.Complete(ctx, req)
}

func (s *refusing) Release(ctx context.Context, req idem.ReleaseRequest) error {
	if err := s.refused(); err != nil {
		return err
	}
	return s.Store.Release(ctx, req)
}

func (s *refusing) Renew(ctx context.Context, req idem.RenewRequest) error {
	if err := s.refused(); err != nil {
		return err
	}
	return s.Store.Renew(ctx, req)
}

func (s *refusing) Get(ctx context.Context, key idem.Key) (idem.Record, error) {
	if err := s.refused(); err != nil {
		return idem.Record{}, err
	}
	return s.Store.Get(ctx, key)
}

// refusingTx is refusing over a transactional inbox on *sql.Tx: while
// down, transactions cannot begin and markers cannot be written.
type refusingTx struct {
	*refusing
	tx idem.TxStore[*sql.Tx]
}

func (s *refusingTx) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := s.refused(); err != nil {
		return err
	}
	return s.tx.InTx(ctx, fn)
}

func (s *refusingTx) Mark(ctx context.Context, tx *sql.Tx, req idem.ClaimRequest) (idem.Claim, error) {
	if err := s.refused(); err != nil {
		return idem.Claim{}, err
	}
	return s.tx.Mark(ctx, tx, req)
}

func (s *refusingTx) SaveResult(ctx context.Context, tx *sql.Tx, key idem.Key, result []byte) error {
	if err := s.refused(); err != nil {
		return err
	}
	return s.tx.SaveResult(ctx, tx, key, result)
}
