package sqsidem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// ErrNotDeadLetter is returned by DeadLetterOf and Replay for a message
// that no Consumer dead-lettered (it has no HeaderDeadLetter attribute):
// one SQS moved itself at the redrive policy's maxReceiveCount, for one.
// Such a message is the original as it was sent: send it back to its
// queue as it is (its Idem-Id keeps its key), or with SQS's redrive
// (StartMessageMoveTask).
var ErrNotDeadLetter = errors.New("sqsidem: not a dead letter of an idem consumer")

// Replay sends dl, a dead letter a Consumer wrote (received from the
// dead-letter queue), back to the queue it came from (its Idem-Queue
// header): its body and its own attributes as they were (its Idem-Id, the
// key MessageOf reads, among them), without idem's headers and its
// position. On a FIFO queue it goes back to its message group with a
// deduplication id of its own, dl's MessageId: never the original's, which
// SQS remembers for five minutes and would drop the replay under,
// silently; the consumer deduplicates by the key. A replay of dl retried
// within five minutes is sent once; the dead letter of a replay is another
// message, with a MessageId of its own. It returns once SQS accepted the
// message; delete dl afterwards.
//
// The consumer's record then decides, as for any redelivery: a key
// completed meanwhile is a duplicate, deleted without running the
// handler; a key never completed is processed; content that conflicts
// with the recorded key is dead-lettered again. Keep the guard's
// Retention longer than a dead letter may wait before it is replayed
// (SQS keeps messages at most 14 days).
func Replay(ctx context.Context, client Client, dl *types.Message) error {
	packed, ok := dl.MessageAttributes[HeaderDeadLetter]
	if !ok || packed.StringValue == nil {
		return ErrNotDeadLetter
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(*packed.StringValue), &h); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNotDeadLetter, HeaderDeadLetter, err)
	}
	queue := h[HeaderQueue]
	if queue == "" {
		return fmt.Errorf("%w: no %s", ErrNotDeadLetter, HeaderQueue)
	}
	in := &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: dl.Body, MessageAttributes: replayedAttributes(dl, h)}
	if isFIFO(queue) {
		in.MessageGroupId = aws.String(h[HeaderGroup])
		in.MessageDeduplicationId = dl.MessageId
	}
	if _, err := client.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("sqsidem: replay %s to %s: %w", aws.ToString(dl.MessageId), queue, err)
	}
	return nil
}
