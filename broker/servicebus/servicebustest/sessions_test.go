package servicebustest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/idemgo/idem/broker/servicebus/servicebustest"
)

func sessionMsg(id, session string) *azservicebus.Message {
	return &azservicebus.Message{MessageID: &id, SessionID: &session, Body: []byte(id)}
}

func sessionQueue(t *testing.T, opts servicebustest.QueueOptions) (*servicebustest.Server, *azservicebus.Client) {
	t.Helper()
	srv, client := newServer(t)
	opts.RequiresSession = true
	if err := srv.CreateQueue("s", opts); err != nil {
		t.Fatal(err)
	}
	return srv, client
}

// A session receiver gets its session's messages only, in order; another
// receiver accepting the next session gets the other session; neither
// sees the other's messages.
func TestSessionFilterAndAcceptNext(t *testing.T) {
	_, client := sessionQueue(t, servicebustest.QueueOptions{})
	send(t, client, "s", sessionMsg("a1", "A"), sessionMsg("b1", "B"), sessionMsg("a2", "A"), sessionMsg("b2", "B"))

	a, err := client.AcceptSessionForQueue(ctxT(t), "s", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.SessionID() != "A" || !a.LockedUntil().After(time.Now()) {
		t.Fatalf("accepted session %q locked until %v", a.SessionID(), a.LockedUntil())
	}
	next, err := client.AcceptNextSessionForQueue(ctxT(t), "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if next.SessionID() != "B" {
		t.Fatalf("next session %q, want B (A is locked)", next.SessionID())
	}
	for _, tc := range []struct {
		r    *azservicebus.SessionReceiver
		want []string
	}{{a, []string{"a1", "a2"}}, {next, []string{"b1", "b2"}}} {
		for _, want := range tc.want {
			msgs, err := tc.r.ReceiveMessages(ctxT(t), 1, nil)
			if err != nil || len(msgs) != 1 {
				t.Fatalf("session %s: %d messages, %v", tc.r.SessionID(), len(msgs), err)
			}
			m := msgs[0]
			if m.MessageID != want || m.SessionID == nil || *m.SessionID != tc.r.SessionID() {
				t.Fatalf("session %s got %s (session %v), want %s", tc.r.SessionID(), m.MessageID, m.SessionID, want)
			}
			if err := tc.r.CompleteMessage(ctxT(t), m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A session locked by one receiver cannot be accepted by another
// (session-cannot-be-locked, at once); once its receiver closes, it can.
func TestSessionLockedElsewhere(t *testing.T) {
	_, client := sessionQueue(t, servicebustest.QueueOptions{})
	send(t, client, "s", sessionMsg("a1", "A"))
	a, err := client.AcceptSessionForQueue(ctxT(t), "s", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := client.AcceptSessionForQueue(ctx, "s", "A", nil); err == nil || ctx.Err() != nil {
		t.Fatalf("second accept of a locked session: %v (context %v), want an immediate refusal", err, ctx.Err())
	}
	m, err := a.ReceiveMessages(ctxT(t), 1, nil)
	if err != nil || len(m) != 1 {
		t.Fatal(len(m), err)
	}
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The closed receiver's unsettled message comes back to the next holder.
	b, err := client.AcceptSessionForQueue(ctxT(t), "s", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.ReceiveMessages(ctxT(t), 1, nil)
	if err != nil || len(got) != 1 || got[0].MessageID != "a1" || got[0].DeliveryCount != 2 {
		t.Fatalf("after the holder closed: %v %v", got, err)
	}
}

// The session lock runs out unless renewed: renewed, the receiver keeps
// the session past its lock duration; not renewed, another receiver takes
// it and gets the message again with DeliveryCount + 1.
func TestSessionLockRenewalAndExpiry(t *testing.T) {
	const lock = 300 * time.Millisecond
	_, client := sessionQueue(t, servicebustest.QueueOptions{LockDuration: lock})
	send(t, client, "s", sessionMsg("a1", "A"))
	a, err := client.AcceptSessionForQueue(ctxT(t), "s", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	first := a.LockedUntil()
	msgs, err := a.ReceiveMessages(ctxT(t), 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatal(len(msgs), err)
	}
	for range 3 {
		time.Sleep(lock / 2) // the work, under a renewed lock
		if err := a.RenewSessionLock(ctxT(t), nil); err != nil {
			t.Fatalf("renew session lock: %v", err)
		}
	}
	if !a.LockedUntil().After(first) {
		t.Fatalf("locked until %v after renewals, first %v", a.LockedUntil(), first)
	}
	if err := a.CompleteMessage(ctxT(t), msgs[0], nil); err != nil {
		t.Fatalf("complete under a renewed session lock: %v", err)
	}

	// Not renewed: the lock runs out and the session is free.
	send(t, client, "s", sessionMsg("a2", "A"))
	msgs, err = a.ReceiveMessages(ctxT(t), 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatal(len(msgs), err)
	}
	// An accept-next waits for a free session: A's, once its lock ends.
	b, err := client.AcceptNextSessionForQueue(ctxT(t), "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.ReceiveMessages(ctxT(t), 1, nil)
	if b.SessionID() != "A" || err != nil || len(got) != 1 || got[0].MessageID != "a2" || got[0].DeliveryCount != 2 {
		t.Fatalf("session %s after the lock ran out: %v %v", b.SessionID(), got, err)
	}
}

// An accept-next with no session to give fails with CodeTimeout when the
// time it asked for (its context's deadline) runs out.
func TestAcceptNextTimesOut(t *testing.T) {
	_, client := sessionQueue(t, servicebustest.QueueOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := client.AcceptNextSessionForQueue(ctx, "s", nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeTimeout {
		t.Fatalf("accept-next on an empty queue: %v, want %s", err, azservicebus.CodeTimeout)
	}
}

// Session state is kept per session, for its lock holder.
func TestSessionState(t *testing.T) {
	_, client := sessionQueue(t, servicebustest.QueueOptions{})
	a, err := client.AcceptSessionForQueue(ctxT(t), "s", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := a.GetSessionState(ctxT(t), nil); err != nil || st != nil {
		t.Fatalf("state of a new session: %q %v", st, err)
	}
	if err := a.SetSessionState(ctxT(t), []byte("step-2"), nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	b, err := client.AcceptSessionForQueue(ctxT(t), "s", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := b.GetSessionState(ctxT(t), nil); err != nil || string(st) != "step-2" {
		t.Fatalf("state after a new accept: %q %v", st, err)
	}
}

// Sessions are refused where the entity says otherwise, at once and
// without retries: a session receiver on a queue without sessions, a
// plain receiver on a session queue, a message without a SessionID sent
// to a session queue.
func TestSessionRefusals(t *testing.T) {
	srv, client := sessionQueue(t, servicebustest.QueueOptions{})
	if err := srv.CreateQueue("plain", servicebustest.QueueOptions{}); err != nil {
		t.Fatal(err)
	}
	send(t, client, "plain", &azservicebus.Message{MessageID: strPtr("p1"), SessionID: strPtr("A")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := client.AcceptSessionForQueue(ctx, "plain", "A", nil); err == nil || ctx.Err() != nil {
		t.Fatalf("AcceptSessionForQueue on a queue without sessions: %v (context %v)", err, ctx.Err())
	}
	if _, err := client.AcceptNextSessionForQueue(ctx, "plain", nil); err == nil || ctx.Err() != nil {
		t.Fatalf("AcceptNextSessionForQueue on a queue without sessions: %v (context %v)", err, ctx.Err())
	}
	r, err := client.NewReceiverForQueue("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if msgs, err := r.ReceiveMessages(ctx, 1, nil); err == nil || ctx.Err() != nil {
		t.Fatalf("plain receiver on a session queue: %d messages, %v (context %v)", len(msgs), err, ctx.Err())
	}
	s, err := client.NewSender("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: strPtr("x")}, nil); err == nil || ctx.Err() != nil {
		t.Fatalf("send without SessionID to a session queue: %v (context %v)", err, ctx.Err())
	}
}

// Many sessions, many receivers: no receiver ever gets a message of a
// session other than the one it holds, and each session's messages come
// in order.
func TestSessionIsolation(t *testing.T) {
	_, client := sessionQueue(t, servicebustest.QueueOptions{})
	var msgs []*azservicebus.Message
	for i := range 20 {
		for _, s := range []string{"A", "B", "C"} {
			msgs = append(msgs, sessionMsg(fmt.Sprintf("%s%02d", s, i), s))
		}
	}
	send(t, client, "s", msgs...)
	for range 3 {
		r, err := client.AcceptNextSessionForQueue(ctxT(t), "s", nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			got, err := r.ReceiveMessages(ctxT(t), 1, nil)
			if err != nil || len(got) != 1 {
				t.Fatal(len(got), err)
			}
			if want := fmt.Sprintf("%s%02d", r.SessionID(), i); got[0].MessageID != want {
				t.Fatalf("session %s: got %s, want %s", r.SessionID(), got[0].MessageID, want)
			}
			if err := r.CompleteMessage(ctxT(t), got[0], nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A session receiver's peek browses its own session only.
func TestSessionPeek(t *testing.T) {
	_, client := sessionQueue(t, servicebustest.QueueOptions{})
	send(t, client, "s", sessionMsg("a1", "A"), sessionMsg("b1", "B"), sessionMsg("a2", "A"))
	a, err := client.AcceptSessionForQueue(ctxT(t), "s", "A", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := a.PeekMessages(ctxT(t), 10, nil)
	if err != nil || len(msgs) != 2 || msgs[0].MessageID != "a1" || msgs[1].MessageID != "a2" {
		t.Fatalf("peek of session A: %d messages, %v", len(msgs), err)
	}
}
