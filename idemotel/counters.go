package idemotel

import "go.opentelemetry.io/otel/metric"

// counter is one Int64Counter to create: where it goes, its name,
// description and unit.
type counter struct {
	dst              *metric.Int64Counter
	name, desc, unit string
}

func makeCounters(m metric.Meter, cs ...counter) error {
	for _, c := range cs {
		var err error
		if *c.dst, err = m.Int64Counter(c.name, metric.WithDescription(c.desc), metric.WithUnit(c.unit)); err != nil {
			return err
		}
	}
	return nil
}
