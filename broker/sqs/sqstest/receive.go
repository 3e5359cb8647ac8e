package sqstest

import (
	"context"
	"strconv"
	"time"
)

type ctxT = context.Context

type receiveIn struct {
	QueueUrl                    string   `json:"QueueUrl"`
	AttributeNames              []string `json:"AttributeNames"`
	MessageSystemAttributeNames []string `json:"MessageSystemAttributeNames"`
	MessageAttributeNames       []string `json:"MessageAttributeNames"`
	MaxNumberOfMessages         *int     `json:"MaxNumberOfMessages"`
	VisibilityTimeout           *int     `json:"VisibilityTimeout"`
	WaitTimeSeconds             *int     `json:"WaitTimeSeconds"`
}

type received struct {
	MessageId         string               `json:"MessageId"`
	ReceiptHandle     string               `json:"ReceiptHandle"`
	MD5OfBody         string               `json:"MD5OfBody"`
	Body              string               `json:"Body"`
	Attributes        map[string]string    `json:"Attributes,omitempty"`
	MessageAttributes map[string]attribute `json:"MessageAttributes,omitempty"`
}

func (s *Server) receiveMessage(ctx ctxT, in *receiveIn) (any, error) {
	limit := 1
	if in.MaxNumberOfMessages != nil {
		limit = *in.MaxNumberOfMessages
		if limit < 1 || limit > 10 {
			return nil, invalidParameter("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", limit)
		}
	}
	s.mu.Lock()
	q, err := s.queueOf(in.QueueUrl)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	vis, wait := q.visibility, q.wait
	s.mu.Unlock()
	if in.VisibilityTimeout != nil {
		if *in.VisibilityTimeout < 0 || *in.VisibilityTimeout > 43200 {
			return nil, invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200, if provided.", *in.VisibilityTimeout)
		}
		vis = time.Duration(*in.VisibilityTimeout) * time.Second
	}
	if in.WaitTimeSeconds != nil {
		if *in.WaitTimeSeconds < 0 || *in.WaitTimeSeconds > 20 {
			return nil, invalidParameter("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", *in.WaitTimeSeconds)
		}
		wait = time.Duration(*in.WaitTimeSeconds) * time.Second
	}
	system := map[string]bool{}
	for _, n := range append(in.AttributeNames, in.MessageSystemAttributeNames...) {
		system[n] = true
	}
	deadline := time.Now().Add(wait)
	for {
		if ctx.Err() != nil {
			// The client is gone: take nothing for it. (A client that goes
			// between this check and the answer loses what it took, in
			// flight until its visibility timeout, as with SQS.)
			return nil, ctx.Err()
		}
		s.mu.Lock()
		if s.queues[q.name] != q {
			s.mu.Unlock()
			return nil, noQueue(in.QueueUrl)
		}
		msgs, next := s.receiveLocked(q, limit, vis)
		changed := s.changed
		out := make([]received, len(msgs))
		for i, m := range msgs {
			out[i] = m.view(system, in.MessageAttributeNames)
		}
		s.mu.Unlock()
		left := time.Until(deadline)
		if len(out) > 0 || left <= 0 {
			return map[string]any{"Messages": out}, nil
		}
		if !next.IsZero() {
			left = min(left, time.Until(next))
		}
		t := time.NewTimer(max(left, time.Millisecond))
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// receiveLocked takes up to max visible messages of q, in order: on a FIFO
// queue none of a group that has a message in flight. A message received
// maxReceiveCount times is moved to the dead-letter queue instead. next is
// when the earliest invisible message becomes visible. s.mu is held.
func (s *Server) receiveLocked(q *queue, limit int, vis time.Duration) (out []*message, next time.Time) {
	now := time.Now()
	blocked := map[string]bool{}
	moved := false
	keep := q.msgs[:0]
	for _, m := range q.msgs {
		switch {
		case m.visibleAt.After(now):
			blocked[m.group] = true
			if next.IsZero() || m.visibleAt.Before(next) {
				next = m.visibleAt
			}
		case len(out) == limit, q.fifo && blocked[m.group]:
		case q.maxReceives > 0 && m.receives >= q.maxReceives && s.queueByARN(q.redriveTo) != nil:
			dlq := s.queueByARN(q.redriveTo)
			m.q, m.handle, m.visibleAt = dlq, "", now
			dlq.msgs = append(dlq.msgs, m)
			moved = true
			continue
		default:
			m.receives++
			if m.firstReceive.IsZero() {
				m.firstReceive = now
			}
			m.receivedAt = now
			m.handle = m.id + "#" + s.newID()
			s.handles[m.handle] = m
			m.visibleAt = now.Add(vis)
			out = append(out, m)
		}
		keep = append(keep, m)
	}
	clear(q.msgs[len(keep):])
	q.msgs = keep
	if moved {
		s.changedLocked()
	}
	return out, next
}

// view is m as a receive returns it, with the system attributes asked
// for (All, or by name) and the message attributes asked for (All, .*
// prefixes, or by name).
func (m *message) view(system map[string]bool, names []string) received {
	r := received{MessageId: m.id, ReceiptHandle: m.handle, MD5OfBody: md5Hex(m.body), Body: m.body}
	all := map[string]string{
		"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
		"ApproximateReceiveCount":          strconv.Itoa(m.receives),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
		"SenderId":                         Account,
	}
	if m.q.fifo {
		all["MessageGroupId"], all["MessageDeduplicationId"], all["SequenceNumber"] = m.group, m.dedup, m.seq
	}
	for name, v := range all {
		if system["All"] || system[name] {
			if r.Attributes == nil {
				r.Attributes = map[string]string{}
			}
			r.Attributes[name] = v
		}
	}
	for name, a := range m.attrs {
		for _, want := range names {
			if want == "All" || want == ".*" || want == name || (len(want) > 2 && want[len(want)-2:] == ".*" && len(name) >= len(want)-2 && name[:len(want)-2] == want[:len(want)-2]) {
				if r.MessageAttributes == nil {
					r.MessageAttributes = map[string]attribute{}
				}
				r.MessageAttributes[name] = a
				break
			}
		}
	}
	return r
}

// inFlight resolves a receipt handle for a visibility change: the
// message, if the handle is its current one and it is still in flight.
// s.mu is held.
func (s *Server) inFlight(url, handle string) (*message, error) {
	q, err := s.queueOf(url)
	if err != nil {
		return nil, err
	}
	m := s.handles[handle]
	switch {
	case m == nil:
		return nil, errf(404, "ReceiptHandleIsInvalid", "", "The input receipt handle %q is not a valid receipt handle.", handle)
	case m.deleted || m.q != q || m.handle != handle:
		return nil, invalidParameter("Value %s for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", handle)
	case !m.visibleAt.After(time.Now()):
		return nil, errf(400, "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "The message referred to isn't in flight.")
	}
	return m, nil
}

type handleIn struct {
	Id                string `json:"Id"` // batch entries only
	QueueUrl          string `json:"QueueUrl"`
	ReceiptHandle     string `json:"ReceiptHandle"`
	VisibilityTimeout *int   `json:"VisibilityTimeout"`
}

// deleteLocked deletes the message of handle: a superseded handle (the
// message received again since) succeeds and deletes nothing, as SQS
// documents. s.mu is held.
func (s *Server) deleteLocked(q *queue, handle string) error {
	m := s.handles[handle]
	switch {
	case m == nil:
		return errf(404, "ReceiptHandleIsInvalid", "", "The input receipt handle %q is not a valid receipt handle.", handle)
	case m.deleted || m.q != q || m.handle != handle:
		return nil
	}
	m.deleted = true
	for i, x := range q.msgs {
		if x == m {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			break
		}
	}
	s.changedLocked()
	return nil
}

func (s *Server) deleteMessage(_ ctxT, in *handleIn) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueOf(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if in.Id != "" || in.VisibilityTimeout != nil {
		return nil, notModelled("parameter Id or VisibilityTimeout of DeleteMessage")
	}
	if err := s.deleteLocked(q, in.ReceiptHandle); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

type handleBatchIn struct {
	QueueUrl string     `json:"QueueUrl"`
	Entries  []handleIn `json:"Entries"`
}

// done is a batch entry that succeeded.
type done struct {
	Id string `json:"Id"`
}

func (s *Server) deleteMessageBatch(_ ctxT, in *handleBatchIn) (any, error) {
	return batch(s, in.QueueUrl, in.Entries, func(e *handleIn) string { return e.Id },
		func(q *queue, e *handleIn) (any, error) { return done{e.Id}, s.deleteLocked(q, e.ReceiptHandle) })
}

func (s *Server) changeVisibilityBatch(_ ctxT, in *handleBatchIn) (any, error) {
	return batch(s, in.QueueUrl, in.Entries, func(e *handleIn) string { return e.Id },
		func(_ *queue, e *handleIn) (any, error) {
			e.QueueUrl = in.QueueUrl
			return done{e.Id}, s.changeLocked(e)
		})
}

// batch applies op to each entry of a batch on the queue at url, under
// s.mu: an empty batch, one of more than ten entries, and entry ids that
// repeat are refused whole; each entry succeeds or fails on its own.
func batch[E any](s *Server, url string, entries []E, id func(*E) string, op func(*queue, *E) (any, error)) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueOf(url)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(entries))
	for i := range entries {
		ids[i] = id(&entries[i])
	}
	if err := checkBatch(ids); err != nil {
		return nil, err
	}
	ok, bad := []any{}, []batchError{}
	for i := range entries {
		res, err := op(q, &entries[i])
		if err != nil {
			bad = append(bad, failed(ids[i], err))
			continue
		}
		ok = append(ok, res)
	}
	return map[string]any{"Successful": ok, "Failed": bad}, nil
}

func (s *Server) changeVisibility(_ ctxT, in *handleIn) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.Id != "" {
		return nil, notModelled("parameter Id of ChangeMessageVisibility")
	}
	if err := s.changeLocked(in); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// changeLocked sets an in-flight message's visibility timeout, counted
// from now, at most 12 hours after it was received. s.mu is held.
func (s *Server) changeLocked(in *handleIn) error {
	m, err := s.inFlight(in.QueueUrl, in.ReceiptHandle)
	if err != nil {
		return err
	}
	if in.VisibilityTimeout == nil {
		return errf(400, "MissingParameter", "", "The request must contain the parameter VisibilityTimeout.")
	}
	v := time.Duration(*in.VisibilityTimeout) * time.Second
	now := time.Now()
	if *in.VisibilityTimeout < 0 || now.Add(v).After(m.lastReceive().Add(maxInFlight)) {
		return invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", *in.VisibilityTimeout)
	}
	m.visibleAt = now.Add(v)
	s.changedLocked()
	return nil
}
