package sqsidem_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	sqsidem "github.com/idemgo/idem/broker/sqs"
)

// An operator's replay: receive from the dead-letter queue, send each dead
// letter back to the queue it came from (its Idem-Queue header), then
// delete it from the dead-letter queue.
func ExampleReplay() {
	ctx := context.Background()
	client := sqs.New(sqs.Options{Region: "eu-west-1"}) // credentials from your aws.Config in production
	dlq := "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq"
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, dl := range out.Messages {
		if err := sqsidem.Replay(ctx, client, &dl); err != nil {
			log.Printf("not replayed: %v", err)
			continue
		}
		if _, err := client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(dlq), ReceiptHandle: dl.ReceiptHandle}); err != nil {
			log.Printf("replayed, not deleted: %v", err)
		}
	}
}
