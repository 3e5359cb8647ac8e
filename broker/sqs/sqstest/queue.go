package sqstest

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// dedupWindow is how long a FIFO queue remembers a deduplication id.
const dedupWindow = 5 * time.Minute

// maxInFlight is how long after its receipt a message's visibility may
// end: 12 hours.
const maxInFlight = 12 * time.Hour

type queue struct {
	name, url, arn string
	attrs          map[string]string // as created, for CreateQueue's idempotence

	fifo, contentDedup bool
	visibility, delay  time.Duration
	wait               time.Duration // ReceiveMessageWaitTimeSeconds
	redriveTo          string        // the dead-letter queue's ARN
	maxReceives        int

	msgs  []*message // in send order
	dedup map[string]dedupEntry
	seq   uint64
}

type dedupEntry struct {
	id  string
	seq string
	at  time.Time
}

type message struct {
	q            *queue
	id, body     string
	attrs        map[string]attribute
	sent         time.Time
	group, dedup string
	seq          string
	receives     int
	firstReceive time.Time
	receivedAt   time.Time // the last receive
	visibleAt    time.Time
	handle       string // the current receipt handle; "" before the first receive
	deleted      bool
}

func (m *message) lastReceive() time.Time { return m.receivedAt }

// attribute is a message attribute as the JSON protocol carries it.
type attribute struct {
	DataType         string   `json:"DataType"`
	StringValue      *string  `json:"StringValue,omitempty"`
	BinaryValue      []byte   `json:"BinaryValue,omitempty"`
	StringListValues []string `json:"StringListValues,omitempty"`
	BinaryListValues [][]byte `json:"BinaryListValues,omitempty"`
}

func (s *Server) newID() string {
	s.ids++
	var b [8]byte
	rand.Read(b[:])
	return fmt.Sprintf("%08x-%s", s.ids, hex.EncodeToString(b[:]))
}

func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

type createQueueIn struct {
	QueueName  string            `json:"QueueName"`
	Attributes map[string]string `json:"Attributes"`
}

func seconds(attrs map[string]string, name string, def, maxSec int) (time.Duration, error) {
	v, ok := attrs[name]
	if !ok {
		return time.Duration(def) * time.Second, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxSec {
		return 0, errf(400, "InvalidAttributeValue", "", "Invalid value for the parameter %s.", name)
	}
	return time.Duration(n) * time.Second, nil
}

func (s *Server) createQueue(_ ctxT, in *createQueueIn) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in.QueueName == "" || len(in.QueueName) > 80 {
		return nil, invalidParameter("Value %q for parameter QueueName is invalid.", in.QueueName)
	}
	if q := s.queues[in.QueueName]; q != nil {
		if fmt.Sprint(q.attrs) != fmt.Sprint(in.Attributes) {
			return nil, errf(400, "QueueNameExists", "QueueAlreadyExists", "A queue already exists with the same name and a different value for attribute(s)")
		}
		return map[string]string{"QueueUrl": q.url}, nil
	}
	q := &queue{name: in.QueueName, url: s.url + "/" + Account + "/" + in.QueueName,
		arn: "arn:aws:sqs:" + Region + ":" + Account + ":" + in.QueueName, attrs: in.Attributes, dedup: map[string]dedupEntry{}}
	for name, v := range in.Attributes {
		switch name {
		case "VisibilityTimeout", "DelaySeconds", "ReceiveMessageWaitTimeSeconds", "RedrivePolicy":
		case "FifoQueue":
			q.fifo = v == "true"
		case "ContentBasedDeduplication":
			q.contentDedup = v == "true"
		default:
			return nil, notModelled("queue attribute %s", name)
		}
	}
	var err error
	if q.visibility, err = seconds(in.Attributes, "VisibilityTimeout", 30, 43200); err != nil {
		return nil, err
	}
	if q.delay, err = seconds(in.Attributes, "DelaySeconds", 0, 900); err != nil {
		return nil, err
	}
	if q.wait, err = seconds(in.Attributes, "ReceiveMessageWaitTimeSeconds", 0, 20); err != nil {
		return nil, err
	}
	if q.fifo != strings.HasSuffix(q.name, ".fifo") {
		return nil, invalidParameter("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix")
	}
	if q.contentDedup && !q.fifo {
		return nil, errf(400, "InvalidAttributeName", "", "Unknown Attribute ContentBasedDeduplication.")
	}
	if rp, ok := in.Attributes["RedrivePolicy"]; ok {
		var p struct {
			Target string          `json:"deadLetterTargetArn"`
			Max    json.RawMessage `json:"maxReceiveCount"`
		}
		if err := json.Unmarshal([]byte(rp), &p); err != nil {
			return nil, errf(400, "InvalidAttributeValue", "", "Invalid value for the parameter RedrivePolicy: %v", err)
		}
		n, err := strconv.Atoi(strings.Trim(string(p.Max), `"`))
		if err != nil || n < 1 || n > 1000 {
			return nil, errf(400, "InvalidAttributeValue", "", "Value %s for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: %s, valid values are from 1 to 1000 both inclusive.", rp, p.Max)
		}
		dlq := s.queueByARN(p.Target)
		if dlq == nil {
			return nil, errf(400, "InvalidAttributeValue", "", "Value %s for parameter RedrivePolicy is invalid. Reason: Dead-letter target does not exist.", rp)
		}
		if dlq.fifo != q.fifo {
			return nil, errf(400, "InvalidAttributeValue", "", "Value %s for parameter RedrivePolicy is invalid. Reason: Dead-letter queue must be same type of queue as the source.", rp)
		}
		q.redriveTo, q.maxReceives = p.Target, n
	}
	s.queues[q.name] = q
	return map[string]string{"QueueUrl": q.url}, nil
}

func (s *Server) queueByARN(arn string) *queue {
	for _, q := range s.queues {
		if q.arn == arn {
			return q
		}
	}
	return nil
}

type queueNameIn struct {
	QueueName              string `json:"QueueName"`
	QueueOwnerAWSAccountId string `json:"QueueOwnerAWSAccountId"`
}

func (s *Server) getQueueURL(_ ctxT, in *queueNameIn) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[in.QueueName]
	if q == nil {
		return nil, noQueue(in.QueueName)
	}
	return map[string]string{"QueueUrl": q.url}, nil
}

type queueURLIn struct {
	QueueUrl       string   `json:"QueueUrl"`
	AttributeNames []string `json:"AttributeNames"`
}

func (s *Server) deleteQueue(_ ctxT, in *queueURLIn) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueOf(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	delete(s.queues, q.name)
	for _, m := range q.msgs {
		m.deleted = true
	}
	s.changedLocked()
	return struct{}{}, nil
}

func (s *Server) getQueueAttributes(_ ctxT, in *queueURLIn) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueOf(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	visible, inFlight, delayed := 0, 0, 0
	for _, m := range q.msgs {
		switch {
		case !m.visibleAt.After(now):
			visible++
		case m.handle != "":
			inFlight++
		default:
			delayed++
		}
	}
	all := map[string]string{
		"QueueArn":                              q.arn,
		"VisibilityTimeout":                     strconv.Itoa(int(q.visibility / time.Second)),
		"DelaySeconds":                          strconv.Itoa(int(q.delay / time.Second)),
		"ReceiveMessageWaitTimeSeconds":         strconv.Itoa(int(q.wait / time.Second)),
		"ApproximateNumberOfMessages":           strconv.Itoa(visible),
		"ApproximateNumberOfMessagesNotVisible": strconv.Itoa(inFlight),
		"ApproximateNumberOfMessagesDelayed":    strconv.Itoa(delayed),
	}
	if q.redriveTo != "" {
		all["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, q.redriveTo, q.maxReceives)
	}
	if q.fifo {
		all["FifoQueue"] = "true"
		all["ContentBasedDeduplication"] = strconv.FormatBool(q.contentDedup)
	}
	out := map[string]string{}
	for _, name := range in.AttributeNames {
		if name == "All" {
			out = all
			break
		}
		v, ok := all[name]
		switch {
		case ok:
			out[name] = v
		case name != "RedrivePolicy" && name != "FifoQueue" && name != "ContentBasedDeduplication":
			// (those three are left out of a queue that has none, as SQS does)
			return nil, notModelled("queue attribute %s", name)
		}
	}
	return map[string]any{"Attributes": out}, nil
}

// sendEntry is one message to send (SendMessage's input, a batch entry).
type sendEntry struct {
	Id                      string               `json:"Id"` // batch entries only
	QueueUrl                string               `json:"QueueUrl"`
	MessageBody             string               `json:"MessageBody"`
	DelaySeconds            *int                 `json:"DelaySeconds"`
	MessageAttributes       map[string]attribute `json:"MessageAttributes"`
	MessageDeduplicationId  string               `json:"MessageDeduplicationId"`
	MessageGroupId          string               `json:"MessageGroupId"`
	MessageSystemAttributes map[string]attribute `json:"MessageSystemAttributes"`
}

type sendResult struct {
	Id               string `json:"Id,omitempty"`
	MessageId        string `json:"MessageId"`
	MD5OfMessageBody string `json:"MD5OfMessageBody"`
	SequenceNumber   string `json:"SequenceNumber,omitempty"`
}

func (s *Server) sendMessage(_ ctxT, in *sendEntry) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queueOf(in.QueueUrl)
	if err != nil {
		return nil, err
	}
	if in.Id != "" {
		return nil, notModelled("parameter Id")
	}
	res, err := s.sendLocked(q, in)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// sendLocked enqueues one message; s.mu is held.
func (s *Server) sendLocked(q *queue, in *sendEntry) (sendResult, error) {
	if in.MessageBody == "" {
		return sendResult{}, errf(400, "MissingParameter", "", "The request must contain the parameter MessageBody.")
	}
	if len(in.MessageSystemAttributes) > 0 {
		return sendResult{}, notModelled("MessageSystemAttributes")
	}
	if len(in.MessageAttributes) > 10 {
		return sendResult{}, invalidParameter("Number of message attributes [%d] exceeds the allowed maximum [10].", len(in.MessageAttributes))
	}
	for name, a := range in.MessageAttributes {
		t := a.DataType
		switch {
		case t == "":
			return sendResult{}, invalidParameter("The message attribute '%s' must contain non-empty message attribute type.", name)
		case strings.HasPrefix(t, "String") || strings.HasPrefix(t, "Number"):
			if a.StringValue == nil {
				return sendResult{}, invalidParameter("The message attribute '%s' with type '%s' must use field 'String'.", name, t)
			}
		case strings.HasPrefix(t, "Binary"):
			if a.BinaryValue == nil {
				return sendResult{}, invalidParameter("The message attribute '%s' with type 'Binary' must use field 'Binary'.", name)
			}
		default:
			return sendResult{}, invalidParameter("The type of message (user) attribute '%s' is invalid. You must use only the following supported type prefixes: Binary, Number, String.", name)
		}
		if len(a.StringListValues) > 0 || len(a.BinaryListValues) > 0 {
			return sendResult{}, notModelled("list attribute values")
		}
	}
	now := time.Now()
	m := &message{q: q, id: s.newID(), body: in.MessageBody, attrs: in.MessageAttributes, sent: now, visibleAt: now.Add(q.delay)}
	if q.fifo {
		if in.MessageGroupId == "" {
			return sendResult{}, errf(400, "MissingParameter", "", "The request must contain the parameter MessageGroupId.")
		}
		if in.DelaySeconds != nil {
			return sendResult{}, invalidParameter("Value %d for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type.", *in.DelaySeconds)
		}
		m.group, m.dedup = in.MessageGroupId, in.MessageDeduplicationId
		if m.dedup == "" {
			if !q.contentDedup {
				return sendResult{}, invalidParameter("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly")
			}
			sum := sha256.Sum256([]byte(in.MessageBody))
			m.dedup = hex.EncodeToString(sum[:])
		}
		if d, ok := q.dedup[m.dedup]; ok && now.Sub(d.at) < dedupWindow {
			return sendResult{Id: in.Id, MessageId: d.id, MD5OfMessageBody: md5Hex(in.MessageBody), SequenceNumber: d.seq}, nil
		}
		q.seq++
		m.seq = fmt.Sprintf("%020d", q.seq)
		q.dedup[m.dedup] = dedupEntry{id: m.id, seq: m.seq, at: now}
	} else {
		if in.MessageGroupId != "" || in.MessageDeduplicationId != "" {
			return sendResult{}, notModelled("MessageGroupId or MessageDeduplicationId on a standard queue (fair queues)")
		}
		if in.DelaySeconds != nil {
			if *in.DelaySeconds < 0 || *in.DelaySeconds > 900 {
				return sendResult{}, invalidParameter("Value %d for parameter DelaySeconds is invalid.", *in.DelaySeconds)
			}
			m.visibleAt = now.Add(time.Duration(*in.DelaySeconds) * time.Second)
		}
	}
	q.msgs = append(q.msgs, m)
	s.changedLocked()
	return sendResult{Id: in.Id, MessageId: m.id, MD5OfMessageBody: md5Hex(m.body), SequenceNumber: m.seq}, nil
}

type batchError struct {
	Id          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message"`
}

// checkBatch refuses an empty batch, one of more than ten entries, and
// entry ids that repeat.
func checkBatch(ids []string) error {
	switch {
	case len(ids) == 0:
		return errf(400, "EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", "There should be at least one entry in the request.")
	case len(ids) > 10:
		return errf(400, "TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "Maximum number of entries per request are 10. You have sent %d.", len(ids))
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			return errf(400, "BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", "Id %s repeated.", id)
		}
		seen[id] = true
	}
	return nil
}

func failed(id string, err error) batchError {
	ae, _ := err.(*apiError)
	if ae == nil {
		ae = errf(500, "InternalError", "", "%v", err)
	}
	return batchError{Id: id, SenderFault: ae.status < 500, Code: ae.code, Message: ae.msg}
}

type sendBatchIn struct {
	QueueUrl string      `json:"QueueUrl"`
	Entries  []sendEntry `json:"Entries"`
}

func (s *Server) sendMessageBatch(_ ctxT, in *sendBatchIn) (any, error) {
	return batch(s, in.QueueUrl, in.Entries, func(e *sendEntry) string { return e.Id },
		func(q *queue, e *sendEntry) (any, error) { return s.sendLocked(q, e) })
}
