package cosmos_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/cosmos"
	"github.com/idemgo/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	c := newClient(t)
	storetest.Run(t, func(t *testing.T) idem.Store { return newStore(t, c, cosmos.Options{}) })
}

func TestConformanceInspector(t *testing.T) {
	c := newClient(t)
	storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return newStore(t, c, cosmos.Options{}) })
}
