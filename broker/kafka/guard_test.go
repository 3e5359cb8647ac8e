package kafka_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/broker/kafka"
	"github.com/idemgo/idem/store/memory"
)

func TestNewGuardScopesByGroup(t *testing.T) {
	cl, err := kgo.NewClient(kafka.ClientOptions(kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	g, err := kafka.NewGuard(memory.New(), cl, idem.Options{})
	if err != nil || g.Options().Scope != "billing" {
		t.Fatalf("NewGuard = %v, scope %q", err, g.Options().Scope)
	}
	g, err = kafka.NewGuard(memory.New(), cl, idem.Options{Scope: "custom"})
	if err != nil || g.Options().Scope != "custom" {
		t.Fatalf("NewGuard with a scope = %v, scope %q", err, g.Options().Scope)
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := kafka.NewGuard(memory.New(), plain, idem.Options{}); !errors.Is(err, kafka.ErrClientConfig) {
		t.Fatalf("NewGuard without a group = %v", err)
	}
}
