package redistest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is a master, one replica of it and one sentinel watching them
// (quorum 1), all stopped when the test ends.
type Sentinel struct {
	// Addr is the sentinel's address.
	Addr string
	// MasterName is the name the sentinel knows the master by.
	MasterName string
	// Master and Replica are the data nodes as started; a failover swaps
	// their roles.
	Master, Replica *Server
	// Username and Password are the sentinel's own login, as
	// StartSentinelWithAuth set it; "" without one.
	Username, Password string
	sentinel           *Server
}

// SentinelMasterName is the master name StartSentinel configures.
const SentinelMasterName = "freqcap-master"

// StartSentinel starts a master, a replica and a sentinel, and waits until
// the replica is in sync and the sentinel knows both.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	return StartSentinelWithAuth(tb, "", "")
}

// StartSentinelWithAuth is StartSentinel with a login on the sentinel
// itself (not on the data nodes): requirepass password and, when user is
// not "", an ACL user of that name with the same password, allowed
// everything. The helpers of Sentinel log in with them.
func StartSentinelWithAuth(tb testing.TB, user, password string) *Sentinel {
	tb.Helper()
	path := need(tb)
	ctx := context.Background()
	st := &Sentinel{MasterName: SentinelMasterName, Username: user, Password: password}
	st.Master = startPlain(tb, path)
	st.Replica = startPlain(tb, path, "--replicaof", "127.0.0.1", strconv.Itoa(st.Master.Port))
	rc := redis.NewClient(&redis.Options{Addr: st.Replica.Addr})
	defer rc.Close()
	waitUntil(tb, 10*time.Second, "the replica to sync", func() error {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") || !strings.Contains(info, "master_sync_in_progress:0") {
			return fmt.Errorf("replica not in sync")
		}
		return nil
	})

	var lastErr error
	for attempt := 0; attempt < 5 && st.sentinel == nil; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			tb.Fatalf("finding a free port: %v", err)
		}
		dir := tb.TempDir()
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %[3]s 1000\n"+
			"sentinel failover-timeout %[3]s 5000\n",
			ports[0], dir, st.MasterName, st.Master.Port)
		if password != "" {
			conf += fmt.Sprintf("requirepass %q\n", password)
		}
		if user != "" {
			conf += fmt.Sprintf("user %s on >%s ~* &* +@all\n", user, password)
		}
		confPath := dir + "/sentinel.conf"
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			tb.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		s, err := launch(path, dir, addr, ports[0], []string{confPath, "--sentinel"}, func() error { return rawPing(addr) })
		if err != nil {
			lastErr = err
			continue
		}
		tb.Cleanup(s.Stop)
		st.sentinel, st.Addr = s, addr
	}
	if st.sentinel == nil {
		tb.Fatalf("starting redis sentinel: %v", lastErr)
	}
	sc := st.client()
	defer sc.Close()
	waitUntil(tb, 15*time.Second, "the sentinel to know the master and the replica", func() error {
		addr, err := sc.GetMasterAddrByName(ctx, st.MasterName).Result()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[1] != strconv.Itoa(st.Master.Port) {
			return fmt.Errorf("sentinel names master %v", addr)
		}
		reps, err := sc.Replicas(ctx, st.MasterName).Result()
		if err != nil {
			return err
		}
		if len(reps) != 1 || reps[0]["flags"] != "slave" {
			return fmt.Errorf("sentinel sees replicas %v", reps)
		}
		return nil
	})
	return st
}

// MasterAddr asks the sentinel which address is the master now.
func (st *Sentinel) MasterAddr(tb testing.TB) string {
	tb.Helper()
	sc := st.client()
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(context.Background(), st.MasterName).Result()
	if err != nil || len(addr) != 2 {
		tb.Fatalf("asking the sentinel for the master: %v %v", addr, err)
	}
	return addr[0] + ":" + addr[1]
}

// Failover makes the sentinel promote the replica (SENTINEL FAILOVER, no
// agreement needed) and waits until the sentinel names it as master and it
// reports role:master. It returns how long that took. The old master is
// told to follow the new one only when the sentinel next polls it (up to
// 10 s later); until then it still answers as a master.
func (st *Sentinel) Failover(tb testing.TB) time.Duration {
	tb.Helper()
	ctx := context.Background()
	sc := st.client()
	defer sc.Close()
	start := time.Now()
	if err := sc.Failover(ctx, st.MasterName).Err(); err != nil {
		tb.Fatalf("sentinel failover: %v", err)
	}
	nc := redis.NewClient(&redis.Options{Addr: st.Replica.Addr})
	defer nc.Close()
	waitUntil(tb, 20*time.Second, "the sentinel to promote the replica", func() error {
		if a := st.MasterAddr(tb); a != st.Replica.Addr {
			return fmt.Errorf("sentinel still names %s", a)
		}
		info, err := nc.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master") {
			return fmt.Errorf("%s is not yet a master", st.Replica.Addr)
		}
		return nil
	})
	st.Master, st.Replica = st.Replica, st.Master
	return time.Since(start)
}

// client is a client of the sentinel, logged in as the sentinel wants.
func (st *Sentinel) client() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: st.Addr, Username: st.Username, Password: st.Password})
}

// startPlain starts a standalone redis-server (base settings plus args) and
// stops it at test end.
func startPlain(tb testing.TB, path string, args ...string) *Server {
	tb.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			tb.Fatalf("finding a free port: %v", err)
		}
		dir := tb.TempDir()
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		s, err := launch(path, dir, addr, ports[0], append(baseArgs(ports[0], dir), args...), func() error { return rawPing(addr) })
		if err != nil {
			lastErr = err
			continue
		}
		tb.Cleanup(s.Stop)
		return s
	}
	tb.Fatalf("starting redis-server: %v", lastErr)
	return nil
}

func waitUntil(tb testing.TB, limit time.Duration, what string, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("waiting %s for %s: %v", limit, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
