package sqsidem

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
)

// SendOption configures Send.
type SendOption func(*sendConfig)

type sendConfig struct {
	fingerprint idem.FingerprintFunc
}

// WithFingerprint sets how Send fingerprints the message for a FIFO
// queue's MessageDeduplicationId: give it the consumers'
// idem.Options.Fingerprint when it is not the default
// idem.PayloadFingerprint. It sees the message as a consumer's guard does
// (MessageOf). A fingerprint coarser than the consumers' would let SQS's
// deduplication drop content they tell apart.
func WithFingerprint(f idem.FingerprintFunc) SendOption {
	return func(c *sendConfig) { c.fingerprint = f }
}

// maxDedupID is the longest MessageDeduplicationId SQS takes.
const maxDedupID = 128

// Send sends in with the stable message id id, which travels in the
// Idem-Id message attribute (HeaderID) that MessageOf reads: reuse the
// same id when retrying a send. On a FIFO queue (a URL ending in ".fifo")
// it sets MessageDeduplicationId to idem.DedupID(id, fingerprint), the id
// with a digest of the content: within SQS's five-minute deduplication
// interval a repeat of the same content is dropped by SQS, while an id
// reused with other content gets another deduplication id, so SQS never
// drops it unseen: it reaches the consumer, whose guard dead-letters it as
// a conflict. Set in.MessageGroupId for a FIFO queue, as SQS requires.
// SQS's deduplication is a complement to the consumer's, never a
// replacement: its window is five minutes, and a standard queue has none.
//
// in's MessageDeduplicationId must be unset, and in must leave one of
// SQS's ten message attributes free. An empty id is an error wrapping
// idem.ErrNoKey; an id too long for a deduplication id (over 111 bytes)
// one wrapping idem.ErrInvalidKey.
func Send(ctx context.Context, client Client, id string, in *sqs.SendMessageInput, opts ...SendOption) (*sqs.SendMessageOutput, error) {
	if strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("sqsidem: send: %w", idem.ErrNoKey)
	}
	if in.MessageDeduplicationId != nil {
		return nil, fmt.Errorf("%w: sqsidem: send: MessageDeduplicationId is Send's to set", idem.ErrInvalidOptions)
	}
	cfg := sendConfig{fingerprint: idem.PayloadFingerprint}
	for _, o := range opts {
		o(&cfg)
	}
	out := *in
	out.MessageAttributes = make(map[string]types.MessageAttributeValue, len(in.MessageAttributes)+1)
	for k, v := range in.MessageAttributes {
		out.MessageAttributes[k] = v
	}
	out.MessageAttributes[HeaderID] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(id)}
	if isFIFO(aws.ToString(in.QueueUrl)) {
		fp, err := cfg.fingerprint(MessageOf(&types.Message{Body: out.MessageBody, MessageAttributes: out.MessageAttributes}))
		if err != nil {
			return nil, fmt.Errorf("sqsidem: send: fingerprint: %w", err)
		}
		dedup := idem.DedupID(id, fp)
		if len(dedup) > maxDedupID {
			return nil, fmt.Errorf("sqsidem: send: %w: id of %d bytes: SQS takes deduplication ids of at most %d", idem.ErrInvalidKey, len(id), maxDedupID)
		}
		out.MessageDeduplicationId = &dedup
	}
	return client.SendMessage(ctx, &out)
}
