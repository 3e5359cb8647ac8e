package integration_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azeventhubs/v2"
	"github.com/jackc/pgx/v5"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/eventhubs"
	"github.com/idemgo/idem/broker/eventhubs/checkpointstore"
	"github.com/idemgo/idem/store/postgres"
)

// readmeEventHubs is the README's Event Hubs block, compiled here (this
// module has the adapter and the checkpoint store); TestREADMEEventHubs
// checks that README.md shows it as it is here.
func readmeEventHubs(ctx context.Context, pgStore *postgres.Store, consumerClient *azeventhubs.ConsumerClient, dlqProducer *azeventhubs.ProducerClient) error {
	// README: eventhubs
	cps, err := checkpointstore.New(pgStore, checkpointstore.Options{}) // ownership and checkpoints beside idem's records
	if err != nil {
		return err
	}
	p, err := azeventhubs.NewProcessor(consumerClient, cps, nil) // Processors balance the partitions through it
	if err != nil {
		return err
	}
	g, err := eventhubs.NewGuard(pgStore, "orders", azeventhubs.DefaultConsumerGroup, idem.Options{}) // scope: hub and consumer group
	if err != nil {
		return err
	}
	h := eventhubs.HandleCheckpoint(func(ctx context.Context, tx pgx.Tx, ev *azeventhubs.ReceivedEventData) error {
		_, err := tx.Exec(ctx, `insert into charges(order_id, body) values ($1, $2)`, *ev.MessageID, ev.Body)
		return err // the charge, the key's marker and the checkpoint commit together
	})
	err = eventhubs.Consume(ctx, p, g, h, eventhubs.Options{DeadLetter: dlqProducer, EventHub: "orders"})
	// README end
	return err
}

var _ = readmeEventHubs

func TestREADMEEventHubs(t *testing.T) {
	readme, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)\n\t// README: eventhubs\n(.*?)\n\t// README end\n`).FindSubmatch(src)
	if m == nil {
		t.Fatal("no README block in readme_test.go")
	}
	var lines []string
	for _, l := range strings.Split(string(m[1]), "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	if want := "```go\n" + strings.Join(lines, "\n") + "\n```\n"; !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not show the eventhubs block as readme_test.go compiles it:\n%s", want)
	}
}
