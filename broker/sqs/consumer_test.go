package sqsidem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/idemgo/idem"
	sqsidem "github.com/idemgo/idem/broker/sqs"
	"github.com/idemgo/idem/store/memory"
)

func TestNewConsumerRefuses(t *testing.T) {
	g, _ := idem.New(memory.New(), idem.Options{Scope: "s"})
	h := sqsidem.Handle(func(context.Context, *types.Message) ([]byte, error) { return nil, nil })
	c := sqs.New(sqs.Options{Region: "us-east-1"})
	for name, o := range map[string]sqsidem.Options{
		"no queue":            {DeadLetterQueueURL: "d"},
		"no dead-letter":      {QueueURL: "q"},
		"dead-letter is self": {QueueURL: "q", DeadLetterQueueURL: "q"},
		"types differ":        {QueueURL: "q.fifo", DeadLetterQueueURL: "d"},
		"visibility":          {QueueURL: "q", DeadLetterQueueURL: "d", VisibilityTimeout: time.Millisecond},
		"wait":                {QueueURL: "q", DeadLetterQueueURL: "d", WaitTime: time.Minute},
		"negative":            {QueueURL: "q", DeadLetterQueueURL: "d", MaxDeliveries: -1},
	} {
		if _, err := sqsidem.NewConsumer(c, g, h, o); !errors.Is(err, idem.ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", name, err)
		}
	}
	if _, err := sqsidem.NewConsumer(nil, g, h, sqsidem.Options{QueueURL: "q", DeadLetterQueueURL: "d"}); !errors.Is(err, idem.ErrInvalidOptions) {
		t.Errorf("nil client: %v", err)
	}
}
