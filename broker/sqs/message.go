package sqsidem

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker"
)

// HeaderID is the message attribute that carries the producer's stable
// message id (Send sets it); MessageOf reads it into idem.Message.ID.
const HeaderID = "Idem-Id"

// Message attributes of a dead letter. SQS allows a message at most ten
// attributes, so idem's headers (broker.DeadLetterHeaders) and the
// original's position travel in one, HeaderDeadLetter (a JSON object of
// header names and values), beside HeaderReason and the original's own
// attributes; DeadLetterOf unpacks them.
const (
	HeaderDeadLetter   = "Idem-Dead-Letter"
	HeaderReason       = idem.HeaderReason
	HeaderQueue        = "Idem-Queue"             // the original queue's URL
	HeaderPosition     = "Idem-Original-Position" // the original's SQS MessageId
	HeaderSequence     = "Idem-Sequence-Number"   // its SequenceNumber (FIFO)
	HeaderGroup        = "Idem-Message-Group"     // its MessageGroupId (FIFO)
	HeaderReceiveCount = "Idem-Receive-Count"     // its ApproximateReceiveCount when dead-lettered
	HeaderSent         = "Idem-Sent-Timestamp"    // when it was sent (epoch milliseconds, as SQS gives it)
)

// maxAttributes is SQS's limit of message attributes on a message.
const maxAttributes = 10

// MessageOf is what the guard reads of a message: ID from its Idem-Id
// message attribute (HeaderID, set by Send), Payload from its body, its
// message attributes as Headers (String and Number values as they are,
// Binary ones as bytes), ContentType from a Content-Type attribute. Any
// attribute can be the key instead (idem.HeaderKey("order-id") in
// idem.Options.Key). The SQS MessageId is never the key: a producer's
// retry of a send on a standard queue (after a timeout that hid a
// success) is a second message with a MessageId of its own, so a key from
// it would apply the retry again. Nor is the receipt handle or the
// receive count, which change on every delivery.
func MessageOf(m *types.Message) idem.Message {
	im := idem.Message{Payload: []byte(aws.ToString(m.Body))}
	if len(m.MessageAttributes) > 0 {
		im.Headers = make(map[string]string, len(m.MessageAttributes))
		for k, v := range m.MessageAttributes {
			im.Headers[k] = attributeText(v)
		}
	}
	im.ID = im.Headers[HeaderID]
	im.ContentType = im.Header("Content-Type")
	return im
}

func attributeText(v types.MessageAttributeValue) string {
	if v.StringValue != nil {
		return *v.StringValue
	}
	return string(v.BinaryValue)
}

// DeadLetterOf is MessageOf of a dead letter the consumer wrote, with
// idem's headers and the position unpacked from HeaderDeadLetter into
// Headers (and ID the original's, when it had one).
func DeadLetterOf(m *types.Message) (idem.Message, error) {
	im := MessageOf(m)
	packed, ok := im.Headers[HeaderDeadLetter]
	if !ok {
		return im, ErrNotDeadLetter
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(packed), &h); err != nil {
		return im, fmt.Errorf("%w: %s: %v", ErrNotDeadLetter, HeaderDeadLetter, err)
	}
	delete(im.Headers, HeaderDeadLetter)
	for k, v := range h {
		im.Headers[k] = v
	}
	im.ID = im.Headers[HeaderID]
	return im, nil
}

// isPosition reports whether name is one of the dead letter's position
// headers.
func isPosition(name string) bool {
	switch name {
	case HeaderQueue, HeaderPosition, HeaderSequence, HeaderGroup, HeaderReceiveCount, HeaderSent:
		return true
	}
	return false
}

// deadLetterAttributes are the message attributes of m's dead letter:
// HeaderReason, HeaderDeadLetter (idem's headers, the position, and the
// original attributes that do not fit beside them, as text) and the
// original attributes, as many as fit, by name.
func deadLetterAttributes(queueURL string, m *types.Message, dl broker.DeadLetter) (map[string]types.MessageAttributeValue, error) {
	packed := make(map[string]string, len(dl.Headers)+6)
	for k, v := range dl.Headers {
		packed[k] = v
	}
	packed[HeaderQueue], packed[HeaderPosition] = queueURL, aws.ToString(m.MessageId)
	packed[HeaderReceiveCount] = m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)]
	packed[HeaderSent] = m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)]
	if g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; g != "" {
		packed[HeaderGroup] = g
		packed[HeaderSequence] = m.Attributes[string(types.MessageSystemAttributeNameSequenceNumber)]
	}
	out := map[string]types.MessageAttributeValue{
		HeaderReason: {DataType: aws.String("String"), StringValue: aws.String(dl.Reason)},
	}
	names := make([]string, 0, len(m.MessageAttributes))
	for k := range m.MessageAttributes {
		if k != HeaderReason && k != HeaderDeadLetter {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	for i, k := range names {
		if i < maxAttributes-2 {
			out[k] = m.MessageAttributes[k]
		} else {
			packed[k] = attributeText(m.MessageAttributes[k])
		}
	}
	b, err := json.Marshal(packed)
	if err != nil {
		return nil, err
	}
	out[HeaderDeadLetter] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(string(b))}
	return out, nil
}

// replayedAttributes are the attributes a replay of dl carries: the
// original's, those packed in HeaderDeadLetter for want of room included
// (as String attributes), without idem's headers and the position.
func replayedAttributes(dl *types.Message, packed map[string]string) map[string]types.MessageAttributeValue {
	out := map[string]types.MessageAttributeValue{}
	for k, v := range dl.MessageAttributes {
		if k != HeaderDeadLetter && k != HeaderReason && !broker.IsDeadLetterHeader(k) {
			out[k] = v
		}
	}
	for k, v := range packed {
		if _, ok := out[k]; !ok && !broker.IsDeadLetterHeader(k) && !isPosition(k) && !strings.EqualFold(k, HeaderReason) {
			out[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
		}
	}
	return out
}
