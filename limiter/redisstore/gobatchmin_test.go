package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/lua"
)

// sentCommands records the name of every command a client sends, and in
// how many round trips (a pipeline is one), leaving out what sets up a new
// connection.
type sentCommands struct {
	mu     sync.Mutex
	names  []string
	rounds int
	// scriptKeys is how many keys each freqcap.lua run carried, and
	// scriptKeyNames the keys themselves, every run's in one list.
	scriptKeys     []int
	scriptKeyNames []string
}

func (h *sentCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(cmds...)
		return next(ctx, cmds)
	}
}

func (h *sentCommands) note(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	counted := false
	for _, c := range cmds {
		name := c.Name()
		switch name {
		case "hello", "client", "auth", "select": // a new connection's set-up
			continue
		case "command": // the store asking the node whether SET has IFEQ
			continue
		case "eval":
			if argText(c.Args()[1]) == lua.CommitNode {
				name = "eval commit_node"
			}
		case "evalsha":
			if sha, _ := c.Args()[1].(string); sha == commitScript.Hash() {
				name = "commit"
			} else {
				name = "freqcap"
				n, _ := c.Args()[2].(int)
				h.scriptKeys = append(h.scriptKeys, n)
				for _, k := range c.Args()[3 : 3+n] {
					h.scriptKeyNames = append(h.scriptKeyNames, argText(k))
				}
			}
		}
		h.names = append(h.names, name)
		if !counted {
			h.rounds, counted = h.rounds+1, true
		}
	}
}

func (h *sentCommands) take() (names []string, rounds int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	names, rounds = h.names, h.rounds
	h.names, h.rounds = nil, 0
	return names, rounds
}

var _ redis.Hook = (*sentCommands)(nil)

// A lone decision on an idle store is decided in the script, in one round
// trip; with GoBatchMin 1, or while another batch is in a round trip (under
// load), it is decided in Go, in two (the read, then the compare-and-set
// write). All answer alike.
func TestLoneDecisionGoesToTheScript(t *testing.T) {
	c := redistest.Client(t)
	for _, sc := range []*redis.Script{freqcapScript, commitScript} { // no NOSCRIPT retry to count
		if err := sc.Load(context.Background(), c).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sent := &sentCommands{}
	c.AddHook(sent)
	rules := limitertest.SeedRules()
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	for i, tc := range []struct {
		goBatchMin int
		busy       bool // another batch loop is in a round trip
		want       []string
		rounds     int
	}{
		{0, false, []string{"freqcap"}, 1},
		{1, false, []string{"mget", "commit"}, 2},
		{0, true, []string{"mget", "commit"}, 2},
	} {
		s := New(c, Options{Now: func() time.Time { return at }, Timeout: 5 * time.Second, GoBatchMin: tc.goBatchMin})
		want := fmt.Sprint(tc.want)
		if nativeWrites(t, s) { // the write is SET … IFEQ, not commit.lua
			want = strings.ReplaceAll(want, "commit", "set")
		}
		if tc.busy {
			s.main.busy.Add(1)
		}
		sent.take()
		who := limitertest.Vals{"recipient": "lone", "content": fmt.Sprint("c", i)}
		d := limitertest.MustDecide(t, s, limitertest.Req(at, who, rules...))
		names, rounds := sent.take()
		s.Close()
		if !d.Allowed || d.Results[0].Used != int64(i+1) {
			t.Errorf("case %d: %s; want admitted, the recipient's sends counted %d", i, limitertest.Describe(d), i+1)
		}
		if rounds != tc.rounds || fmt.Sprint(names) != want {
			t.Fatalf("case %d (GoBatchMin %d, busy %v): sent %v in %d round trips; want %v in %d", i, tc.goBatchMin, tc.busy, names, rounds, want, tc.rounds)
		}
	}
}
