package cosmos

import (
	"context"
	"fmt"
	"net/http"

	"github.com/Azure/azure-sdk-for-go/sdk/data/azcosmos"

	"github.com/idemgo/idem"
)

// noDefaultTTL is the container's default time to live Migrate sets: none
// for items without one, and each item's own ttl honoured (a container
// without a default ignores the items' ttl).
const noDefaultTTL = -1

// Migrate creates the database and the container when they are missing
// (idempotent; safe from every instance at once): the container
// partitioned by PartitionKeyPath, with a default time to live of -1 so
// that the records' own ttl counts, and Cosmos DB's default indexing
// (every path, which List's ORDER BY and the filters use). A container
// that exists with another partition key path is a *PartitionKeyError; one
// without a default time to live gets it. Throughput is left to the
// account: the container shares the database's, or is serverless.
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.client.CreateDatabase(ctx, azcosmos.DatabaseProperties{ID: s.opts.Database}, nil)
	if err != nil && statusOf(err) != http.StatusConflict {
		return fmt.Errorf("cosmos: migrate: database %s: %w", s.opts.Database, err)
	}
	db, err := s.client.NewDatabase(s.opts.Database)
	if err != nil {
		return fmt.Errorf("cosmos: migrate: %w", err)
	}
	ttl := int32(noDefaultTTL)
	_, err = db.CreateContainer(ctx, azcosmos.ContainerProperties{
		ID:                     s.opts.Container,
		PartitionKeyDefinition: azcosmos.PartitionKeyDefinition{Kind: azcosmos.PartitionKeyKindHash, Paths: []string{PartitionKeyPath}, Version: 2},
		DefaultTimeToLive:      &ttl,
	}, nil)
	if err == nil {
		return nil
	}
	if statusOf(err) != http.StatusConflict {
		return fmt.Errorf("cosmos: migrate: container %s: %w", s.name(), err)
	}
	props, err := s.properties(ctx)
	if err != nil {
		return fmt.Errorf("cosmos: migrate: container %s: %w", s.name(), err)
	}
	if err := s.checkKey(props); err != nil {
		return err
	}
	if props.DefaultTimeToLive == nil {
		props.DefaultTimeToLive = &ttl
		if _, err := s.coll.Replace(ctx, *props, nil); err != nil {
			return fmt.Errorf("cosmos: migrate: default time to live of %s: %w", s.name(), err)
		}
	}
	return nil
}

func (s *Store) name() string { return s.opts.Database + "/" + s.opts.Container }

func (s *Store) properties(ctx context.Context) (*azcosmos.ContainerProperties, error) {
	r, err := s.coll.Read(ctx, nil)
	if err != nil {
		return nil, err
	}
	return r.ContainerProperties, nil
}

func (s *Store) checkKey(p *azcosmos.ContainerProperties) error {
	if paths := p.PartitionKeyDefinition.Paths; len(paths) != 1 || paths[0] != PartitionKeyPath {
		return &PartitionKeyError{Container: s.name(), Paths: paths}
	}
	return nil
}

// CheckSchema reports drift without changing anything: nil when the
// container exists, partitioned by PartitionKeyPath, with a default time to
// live; an *idem.SchemaError naming the database or container missing, or
// the default time to live missing (`idem migrate` restores it); a
// *PartitionKeyError when the container is partitioned by another path,
// which no migration can change.
func (s *Store) CheckSchema(ctx context.Context) error {
	props, err := s.properties(ctx)
	if statusOf(err) == http.StatusNotFound {
		miss := []string{"container " + s.name()}
		db, _ := s.client.NewDatabase(s.opts.Database)
		if _, err := db.Read(ctx, nil); statusOf(err) == http.StatusNotFound {
			miss = append([]string{"database " + s.opts.Database}, miss...)
		}
		return &idem.SchemaError{Missing: miss}
	}
	if err != nil {
		return fmt.Errorf("cosmos: check schema of %s: %w", s.name(), err)
	}
	if err := s.checkKey(props); err != nil {
		return err
	}
	if props.DefaultTimeToLive == nil {
		return &idem.SchemaError{Missing: []string{"default time to live (-1) of container " + s.name() + " (without it the records' ttl is ignored)"}}
	}
	return nil
}

// Drop deletes the container with every record in it. For tests and the
// idem command's cleanup.
func (s *Store) Drop(ctx context.Context) error {
	if _, err := s.coll.Delete(ctx, nil); err != nil && statusOf(err) != http.StatusNotFound {
		return fmt.Errorf("cosmos: drop %s: %w", s.name(), err)
	}
	return nil
}
