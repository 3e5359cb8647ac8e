package redisidem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/idemgo/idem"
	"github.com/idemgo/idem/internal/testenv"
	"github.com/idemgo/idem/store/storetest"
)

// clusterNodeTimeout is the test clusters' cluster-node-timeout: how long a
// master may be unreachable before it is failed over.
const clusterNodeTimeout = 2 * time.Second

// testCluster is a Redis Cluster the test started itself: three masters
// with a replica each, six local redis-server processes on private ports,
// each in its own directory. Every process is stopped and every directory
// removed when the test ends, whether it passed or not.
type testCluster struct {
	nodes []*clusterNode
}

type clusterNode struct {
	addr   string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process is reaped
}

// clusterNodes is three masters and their replicas.
const clusterNodes = 6

// startCluster starts a cluster with extra redis-server arguments (its
// persistence settings). Without redis-server and redis-cli it skips the
// test, or fails it under IDEM_REQUIRE_SERVICES=1.
func startCluster(t *testing.T, extra ...string) *testCluster {
	t.Helper()
	server, err1 := exec.LookPath("redis-server")
	cli, err2 := exec.LookPath("redis-cli")
	if err := errors.Join(err1, err2); err != nil {
		msg := "a test Redis Cluster needs redis-server and redis-cli (apt-get install redis-server), " +
			"or set IDEM_REDIS_CLUSTER to the seeds of a running cluster: " + err.Error()
		if testenv.Required() {
			t.Fatal(msg + " [IDEM_REQUIRE_SERVICES=1]")
		}
		t.Skip(msg)
	}
	ports := testenv.FreePorts(t, 2*clusterNodes) // a client port and a cluster bus port per node
	rc := &testCluster{}
	root := t.TempDir()
	t.Cleanup(func() { rc.stop(t) }) // runs before the TempDir is removed
	for i := range clusterNodes {
		n := &clusterNode{addr: "127.0.0.1:" + strconv.Itoa(ports[2*i]), dir: filepath.Join(root, strconv.Itoa(i))}
		if err := os.Mkdir(n.dir, 0o700); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(ports[2*i]),
			"--cluster-port", strconv.Itoa(ports[2*i+1]), "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(clusterNodeTimeout.Milliseconds(), 10),
			// A replica takes over however long it was cut off from its
			// master: on a loaded test machine it may lag.
			"--cluster-replica-validity-factor", "0",
			"--repl-diskless-sync-delay", "0", // replicas sync at once
			"--dir", n.dir, "--logfile", "redis.log", "--daemonize", "no", "--save", ""}, extra...)
		n.cmd = exec.Command(server, args...)
		n.cmd.Dir = n.dir
		n.cmd.SysProcAttr = childProcAttr()
		if err := n.cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		n.exited = make(chan struct{})
		go func() { _ = n.cmd.Wait(); close(n.exited) }()
		rc.nodes = append(rc.nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range rc.nodes {
		if err := waitFor(ctx, func() error { return nodeClient(n.addr).Ping(ctx).Err() }); err != nil {
			t.Fatalf("redis-server %s did not answer: %v", n.addr, err)
		}
	}
	out, err := exec.CommandContext(ctx, cli, append(append([]string{"--cluster", "create"}, rc.addrs()...),
		"--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := waitFor(ctx, func() error { return clusterHealthy(ctx, rc.addrs(), 3) }); err != nil {
		t.Fatalf("the test cluster did not become healthy: %v", err)
	}
	return rc
}

func (rc *testCluster) addrs() []string {
	var out []string
	for _, n := range rc.nodes {
		out = append(out, n.addr)
	}
	return out
}

func (rc *testCluster) node(addr string) *clusterNode {
	for _, n := range rc.nodes {
		if n.addr == addr {
			return n
		}
	}
	return nil
}

// kill9 kills a node with SIGKILL (no shutdown, no final write) and waits
// until it is gone.
func (n *clusterNode) kill9() {
	_ = n.cmd.Process.Kill()
	<-n.exited
}

// stop kills every node; on failure it first logs the end of each node's
// log.
func (rc *testCluster) stop(t *testing.T) {
	for _, n := range rc.nodes {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(n.dir, "redis.log"))
			if len(b) > 2000 {
				b = b[len(b)-2000:]
			}
			t.Logf("redis-server %s log (end):\n%s", n.addr, b)
		}
		n.kill9()
	}
}

// nodeClient is a client of one node for probing it: short timeouts, no
// retries.
func nodeClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, PoolSize: 1})
}

// waitFor calls f every 50 ms until it succeeds or ctx ends.
func waitFor(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clusterHealthy reports whether every node at addrs says cluster_state:ok
// with all 16384 slots served, and sees at least replicated masters with a
// replica, and whether that many replicas are in sync
// (master_link_status:up).
func clusterHealthy(ctx context.Context, addrs []string, replicated int) error {
	synced := 0
	for _, a := range addrs {
		c := nodeClient(a)
		info, err := c.ClusterInfo(ctx).Result()
		repl, err2 := c.Info(ctx, "replication").Result()
		slots, err3 := c.ClusterSlots(ctx).Result()
		c.Close()
		if err := errors.Join(err, err2, err3); err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return fmt.Errorf("%s: cluster info %q", a, info)
		}
		if strings.Contains(repl, "master_link_status:up") {
			synced++
		}
		withReplica := map[string]bool{}
		for _, r := range slots {
			if len(r.Nodes) > 1 {
				withReplica[r.Nodes[0].Addr] = true
			}
		}
		if len(withReplica) < replicated {
			return fmt.Errorf("%s sees %d masters with a replica, want %d", a, len(withReplica), replicated)
		}
	}
	if synced < replicated {
		return fmt.Errorf("%d replicas in sync, want %d", synced, replicated)
	}
	return nil
}

// clusterClient is a cluster client of the test cluster, closed when the
// test ends.
func clusterClient(t testing.TB, seeds []string) *goredis.ClusterClient {
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: seeds, PoolSize: 32})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCluster runs the tests that run on the standalone Redis on a Redis
// Cluster too: the conformance suites and this package's own tests of races,
// sweeps, batches and lifetimes, then checks how records spread over the
// cluster. The cluster is started by the test (three masters, a replica
// each), or is the one whose seed addresses IDEM_REDIS_CLUSTER names
// (comma-separated); the test deletes its keys there when it ends.
func TestCluster(t *testing.T) {
	var seeds []string
	if env := os.Getenv("IDEM_REDIS_CLUSTER"); env != "" {
		seeds = strings.Split(env, ",")
	} else {
		seeds = startCluster(t, "--appendonly", "no").addrs()
	}
	on := backend{client: func(t testing.TB) goredis.UniversalClient { return clusterClient(t, seeds) }}
	for _, tc := range []struct {
		name   string
		run    func(*testing.T, backend)
		serial bool // real-time leases of a few hundred ms (the suite has some too): alone, before the others
	}{
		{"Conformance", testConformance, true},
		{"ConformanceInspector", testConformanceInspector, false},
		{"InspectorMatchesMemory", testInspectorMatchesMemory, false},
		{"ForeignValue", testForeignValue, false},
		{"TokenAfterRedisDeletesRecord", testTokenAfterRedisDeletesRecord, false},
		{"TwoClientsRaceToClaim", testTwoClientsRaceToClaim, false},
		{"RaceRetakeAgainstLateComplete", testRaceRetakeAgainstLateComplete, false},
		{"GuardAcrossClients", testGuardAcrossClients, false},
		{"SweepBoundedBatches", testSweepBoundedBatches, false},
		{"SweepOneInstanceAtATime", testSweepOneInstanceAtATime, false},
		{"SweepSparesReclaimed", testSweepSparesReclaimed, false},
		{"BatchRewrites", testBatchRewrites, false},
		{"SkewedClockKeepsItsRetention", testSkewedClockKeepsItsRetention, true},
		{"RenewKeepsKeyPastRetention", testRenewKeepsKeyPastRetention, true},
		{"SpreadAndBatchAcrossSlots", testSpreadAndBatchAcrossSlots, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.serial {
				t.Parallel() // each on its own prefix; most of their time is round trips
			}
			tc.run(t, on)
		})
	}
}

// testSpreadAndBatchAcrossSlots: the hash tag is a record's whole identity
// ({scope:id}), not its scope, so the records of one scope spread over the
// slots and over every master; one ClaimBatch of keys in many slots (one
// pipeline per master) acquires each, answers a second batch with
// duplicates, and its rewrites (claim scripts, first sent as EVALSHA to
// nodes that have not seen them) land on every master. List, Stats and
// Sweep see the records of every master.
func testSpreadAndBatchAcrossSlots(t *testing.T, on backend) {
	c := on.client(t).(*goredis.ClusterClient)
	s := newStore(t, c)
	ctx := context.Background()
	now := storetest.T0
	const n = 300
	reqs := make([]idem.ClaimRequest, n)
	for i := range reqs {
		reqs[i] = idem.ClaimRequest{Key: idem.Key{Scope: "one-scope", ID: "k" + strconv.Itoa(i)}, Now: now,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	}
	first, err := s.ClaimBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int64]bool{}
	perMaster := map[string]int{}
	for i, r := range reqs {
		if first[i].Outcome != idem.ClaimAcquired {
			t.Fatalf("batch claim %d: %v", i, first[i].Outcome)
		}
		key := s.Key(r.Key)
		slot, err := c.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		perMaster[m.Options().Addr]++
	}
	var masters atomic.Int32
	err = c.ForEachMaster(ctx, func(context.Context, *goredis.Client) error {
		masters.Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 300 keys over 16384 slots: nearly all in distinct slots.
	if len(slots) < n*9/10 || len(perMaster) != int(masters.Load()) {
		t.Fatalf("%d keys of one scope in %d slots on %d of %d masters (%v); want them spread", n, len(slots),
			len(perMaster), masters.Load(), perMaster)
	}
	t.Logf("%d keys of one scope: %d slots, per master %v", n, len(slots), perMaster)

	again, err := s.ClaimBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range again {
		if again[i].Outcome != idem.ClaimInProgress || again[i].Record.Token != first[i].Record.Token {
			t.Fatalf("second batch claim %d: %v token %d, want in progress under %d", i, again[i].Outcome,
				again[i].Record.Token, first[i].Record.Token)
		}
	}
	// Release every third, then claim the batch again: the released ones go
	// through the claim script on their masters.
	for i := 0; i < n; i += 3 {
		if err := s.Release(ctx, idem.ReleaseRequest{Key: reqs[i].Key, Token: first[i].Record.Token, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(time.Second)
	for i := range reqs {
		reqs[i].Now = later
	}
	third, err := s.ClaimBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, cl := range third {
		want, token := idem.ClaimInProgress, first[i].Record.Token
		if i%3 == 0 {
			want, token = idem.ClaimAcquired, token+1
		}
		if cl.Outcome != want || cl.Record.Token != token {
			t.Fatalf("third batch claim %d: %v token %d, want %v token %d", i, cl.Outcome, cl.Record.Token, want, token)
		}
	}

	recs, err := s.List(ctx, idem.ListFilter{Limit: 1000})
	if err != nil || len(recs) != n {
		t.Fatalf("List across masters = %d records, %v; want %d", len(recs), err, n)
	}
	st, err := s.Stats(ctx, later)
	if err != nil || len(st) != 1 || st[0].InProgress != n {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	// Completed (only settled records expire), then swept on every master.
	for i, cl := range third {
		if err := s.Complete(ctx, idem.CompleteRequest{Key: reqs[i].Key, Token: cl.Record.Token, Now: later, ExpiresAt: later.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	total := 0
	for range 20 {
		n, err := s.Sweep(ctx, idem.SweepRequest{Now: now.Add(2 * time.Hour), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != n {
		t.Fatalf("swept %d across masters, want %d", total, n)
	}
}
