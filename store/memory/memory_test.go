package memory_test

import (
	"testing"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/store/memory"
	"github.com/idemgo/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store { return memory.New() })
}

func TestInspector(t *testing.T) {
	storetest.RunInspector(t, func(t *testing.T) storetest.InspectorStore { return memory.New() })
}
