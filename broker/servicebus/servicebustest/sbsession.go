package servicebustest

import (
	"time"
)

// Service Bus sessions (https://learn.microsoft.com/azure/service-bus-messaging/message-sessions):
// on a session-enabled entity every message carries a SessionID (the AMQP
// group-id), and a receiver accepts one session at a time, by id or the
// next available one, locking the session: only it gets the session's
// messages, in order, until it closes, or the session's lock (renewed
// with renew-session-lock) runs out.

// sessionFilter is the name and descriptor of the source filter a session
// receiver attaches with: its value is the SessionID, or null for the next
// available session, and the server answers with the session it locked.
const (
	sessionFilter     = "com.microsoft:session-filter"
	sessionFilterCode = uint64(0x137000000C)
	// defaultAcceptTimeout is how long an accept-next waits for a session
	// when the client names no com.microsoft:timeout.
	defaultAcceptTimeout = time.Minute
)

// sbSession is one session of an entity. Guarded by the server's lock.
type sbSession struct {
	id          string
	state       []byte
	holder      *link // the receiver holding its lock; nil: free
	lockedUntil time.Time
	timer       *time.Timer
}

// session returns the entity's session id, made on first use.
func (e *entity) session(id string) *sbSession {
	ss := e.sessions[id]
	if ss == nil {
		ss = &sbSession{id: id}
		e.sessions[id] = ss
	}
	return ss
}

// locked reports whether ss is held by a receiver whose lock is running.
func (ss *sbSession) locked(now time.Time) bool {
	return ss.holder != nil && now.Before(ss.lockedUntil)
}

// lockSession gives ss to l for the entity's lock duration.
func (e *entity) lockSession(ss *sbSession, l *link, now time.Time) {
	ss.holder = l
	l.sess = ss
	e.renewSession(ss, now)
}

// renewSession extends ss's lock by the lock duration from now, the
// locks of its messages with it.
func (e *entity) renewSession(ss *sbSession, now time.Time) {
	ss.lockedUntil = now.Add(e.opts.LockDuration)
	for _, m := range e.msgs {
		if m.state == stateLocked && m.holder == ss.holder && m.sessionID == ss.id {
			m.lockedUntil = ss.lockedUntil
		}
	}
	e.armSession(ss)
}

// armSession (re)starts ss's lock timer for its lockedUntil.
func (e *entity) armSession(ss *sbSession) {
	holder := ss.holder
	ss.timer = e.s.core.At(ss.timer, ss.lockedUntil, func() {
		if ss.holder != holder {
			return
		}
		if time.Now().Before(ss.lockedUntil) {
			e.armSession(ss)
			return
		}
		e.freeSession(ss)
	})
}

// freeSession ends ss's lock (it ran out, or its receiver closed): the
// messages locked under it are available again with DeliveryCount + 1, as
// an expired message lock makes them, and the session may be accepted
// again.
func (e *entity) freeSession(ss *sbSession) {
	if ss.timer != nil {
		ss.timer.Stop()
		ss.timer = nil
	}
	if ss.holder != nil {
		ss.holder.sess = nil
	}
	holder := ss.holder
	ss.holder = nil
	var back []*message
	for _, m := range e.msgs {
		if m.state == stateLocked && m.holder == holder && m.sessionID == ss.id {
			back = append(back, m)
		}
	}
	for _, m := range back {
		e.abandon(m, nil)
	}
	e.pump()
}

// nextSession is the free session whose available message comes first,
// nil when there is none.
func (e *entity) nextSession(now time.Time) *sbSession {
	for _, m := range e.msgs {
		if m.state != stateAvailable || m.expired(now) {
			continue
		}
		if ss := e.sessions[m.sessionID]; ss != nil && !ss.locked(now) {
			return ss
		}
	}
	return nil
}

func (e *entity) assignSessions(now time.Time) {
	for len(e.accepting) > 0 {
		ss := e.nextSession(now)
		if ss == nil {
			return
		}
		l := e.accepting[0]
		e.accepting = e.accepting[1:]
		l.acceptTimer.Stop()
		e.lockSession(ss, l, now)
		l.answerSession()
	}
}

// attachSession decides a session receiver's attach: wanted is the
// session filter's value (a SessionID, or nil for the next available
// session). It reports the AMQP error condition and description of a
// refusal, or "" when the link is attached now or waits for a session.
func (e *entity) attachSession(l *link, wanted any, timeout time.Duration) (condition, description string) {
	now := time.Now()
	if id, ok := wanted.(string); ok {
		ss := e.session(id)
		if ss.locked(now) {
			return "com.microsoft:session-cannot-be-locked",
				"The requested session '" + id + "' cannot be accepted. It may be locked by another receiver."
		}
		e.lockSession(ss, l, now)
		l.answerSession()
		return "", ""
	}
	if ss := e.nextSession(now); ss != nil {
		e.lockSession(ss, l, now)
		l.answerSession()
		return "", ""
	}
	// No session to give: the attach waits for one, up to the timeout
	// the client asked for, then fails with com.microsoft:timeout (which
	// the client reports as azservicebus.CodeTimeout).
	l.pendingAccept = true
	e.accepting = append(e.accepting, l)
	l.acceptTimer = time.AfterFunc(timeout, func() {
		s := e.s
		s.core.Lock()
		defer s.core.Unlock()
		if s.core.Closed() || !l.pendingAccept {
			return
		}
		e.dropAccept(l)
		l.Refuse("com.microsoft:timeout", "The operation did not complete within the allocated time: no session was available.")
	})
	return "", ""
}

// dropAccept forgets l's pending accept-next.
func (e *entity) dropAccept(l *link) {
	l.pendingAccept = false
	if l.acceptTimer != nil {
		l.acceptTimer.Stop()
	}
	for i, x := range e.accepting {
		if x == l {
			e.accepting = append(e.accepting[:i:i], e.accepting[i+1:]...)
			break
		}
	}
}

// epochTicks is 1970-01-01 in .NET ticks (100 ns since year 1), the unit
// of com.microsoft:locked-until-utc.
const epochTicks = int64(621355968000000000)

func ticks(t time.Time) int64 { return epochTicks + t.UnixMilli()*10000 }
