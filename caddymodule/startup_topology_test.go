package caddymodule

import (
	"fmt"
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// A store configured as the wrong kind of Redis fails the load, saying
// which setting mends it: each would otherwise load and leave caps off
// (on_error deciding every send, or the sends of another master's keys),
// logged as "unreachable" although the server answered, or as a refused
// user. A cluster node is told by INFO whatever slot the start check's
// key lands in (before, one node of three loaded "ready").
func TestWrongTopologyFailsLoad(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	single := redistest.Start(t)
	st := redistest.StartSentinel(t)
	type tc struct {
		name, redis string
		want        []string
	}
	var cases []tc
	for _, addr := range cluster.Addrs() {
		cases = append(cases, tc{"a cluster node as a server " + addr, fmt.Sprintf(`{"addresses": [%q]}`, addr),
			[]string{"node of a Redis Cluster", "add cluster"}})
	}
	cases = append(cases,
		tc{"a cluster node in a url", fmt.Sprintf(`{"url": "redis://%s/0"}`, cluster.Addrs()[0]),
			[]string{"node of a Redis Cluster", "add cluster"}},
		tc{"a server as a cluster", fmt.Sprintf(`{"addresses": [%q], "cluster": true}`, single.Addr),
			[]string{"cluster support disabled", "remove cluster"}},
		tc{"a sentinel as a server", fmt.Sprintf(`{"addresses": [%q]}`, st.Addr),
			[]string{"is a Sentinel", "name the master with sentinel_master"}},
		tc{"a server as a sentinel", fmt.Sprintf(`{"addresses": [%q], "sentinel_master": "mymaster"}`, single.Addr),
			[]string{"no Sentinel", "remove sentinel_master"}},
		tc{"a master no sentinel watches", fmt.Sprintf(`{"addresses": [%q], "sentinel_master": "nosuch"}`, st.Addr),
			[]string{`no master named "nosuch"`, "SENTINEL MASTERS"}},
		tc{"two servers without cluster", fmt.Sprintf(`{"addresses": [%q, %q]}`, single.Addr, st.Addr),
			[]string{"several addresses", "add cluster", "sentinel_master"}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadWithRedis(t, c.redis, OnErrorAllow)
			expectLoadRefused(t, err, c.want, "username and password", "grant the user", "unreachable")
		})
	}
}
