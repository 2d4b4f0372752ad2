package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/lua"
)

// This file is -commandstats: where Redis's CPU a decision goes, by
// command (INFO commandstats, whose usec is the time inside each command),
// against used_cpu (the rest being the event loop: reading and parsing
// requests, writing replies, the system calls of each wake-up), beside what
// the client sent: its round trips, and the decisions each read carried
// (the batches the batcher made).

// cmdStat is one line of INFO commandstats: calls and µs inside the
// command.
type cmdStat struct{ calls, usec float64 }

// serverStats is what -commandstats reads from the server around a replay.
type serverStats struct {
	cmds map[string]cmdStat
	// cycles and loopUsec are the event loop's wake-ups and the µs they
	// took (INFO stats eventloop_cycles, eventloop_duration_sum: Redis 7.2,
	// Valkey 8), -1 when the server does not say.
	cycles, loopUsec float64
}

func readServerStats(ctx context.Context, c *redis.Client) (serverStats, error) {
	info, err := c.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		return serverStats{}, err
	}
	st := serverStats{cmds: map[string]cmdStat{}, cycles: -1, loopUsec: -1}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "eventloop_cycles":
			st.cycles, _ = strconv.ParseFloat(v, 64)
		case k == "eventloop_duration_sum":
			st.loopUsec, _ = strconv.ParseFloat(v, 64)
		case strings.HasPrefix(k, "cmdstat_"):
			var s cmdStat
			for _, f := range strings.Split(v, ",") {
				name, val, _ := strings.Cut(f, "=")
				switch name {
				case "calls":
					s.calls, _ = strconv.ParseFloat(val, 64)
				case "usec":
					s.usec, _ = strconv.ParseFloat(val, 64)
				}
			}
			st.cmds[strings.TrimPrefix(k, "cmdstat_")] = s
		}
	}
	return st, nil
}

// sentCounter is a client hook that counts what the client sends: round
// trips (a pipeline is one) and commands by name, EVALSHA by script, and
// the keys the MGETs carried.
type sentCounter struct {
	mu         sync.Mutex
	roundTrips int64
	cmds       map[string]int64
	mgetKeys   int64
}

var scriptNames = map[string]string{
	sha1Hex(lua.Commit):  "evalsha commit.lua",
	sha1Hex(lua.Freqcap): "evalsha freqcap.lua",
}

func sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

func newSentCounter() *sentCounter { return &sentCounter{cmds: map[string]int64{}} }

func (h *sentCounter) count(cmds []redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.roundTrips++
	for _, c := range cmds {
		name := c.Name()
		args := c.Args()
		switch name {
		case "evalsha", "eval":
			if s, ok := args[1].(string); ok && scriptNames[s] != "" {
				name = scriptNames[s]
			}
		case "mget":
			h.mgetKeys += int64(len(args) - 1)
		case "set":
			if len(args) > 3 {
				if s, ok := args[3].(string); ok {
					name = "set " + s // set … ifeq, set … nx
				}
			}
		}
		h.cmds[name]++
	}
}

func (h *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func (h *sentCounter) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.roundTrips, h.mgetKeys = 0, 0
	clear(h.cmds)
}

// printCommandStats prints where Redis's CPU went over a replay of n
// decisions (a and b: the server's stats before and after, cpuMicros its
// used_cpu a decision) and what the client sent.
func printCommandStats(design string, run int, n float64, a, b serverStats, cpuMicros float64, sent *sentCounter) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s, run %d: Redis CPU by command, a decision\n\n", design, run)
	sb.WriteString("| command | calls a decision | decisions a call | µs a decision | µs a call |\n|---|---|---|---|---|\n")
	var names []string
	for name := range b.cmds {
		if b.cmds[name].calls > a.cmds[name].calls {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	// Commands a script runs count in their own line and in the script's
	// (EVALSHA's time includes them): the sum takes each command only for
	// the calls the client sent itself.
	var bySent map[string]int64
	if sent != nil {
		sent.mu.Lock()
		bySent = map[string]int64{}
		for name, k := range sent.cmds {
			base, _, _ := strings.Cut(name, " ")
			bySent[base] += k
		}
		sent.mu.Unlock()
	}
	var inCmds float64
	for _, name := range names {
		calls, usec := b.cmds[name].calls-a.cmds[name].calls, b.cmds[name].usec-a.cmds[name].usec
		if name == "info" || name == "scan" || name == "exists" {
			continue // the bench's own reads
		}
		if bySent != nil {
			inCmds += usec * min(float64(bySent[name]), calls) / calls
		} else {
			inCmds += usec
		}
		fmt.Fprintf(&sb, "| %s | %.3f | %.1f | %.2f | %.2f |\n", name, calls/n, n/calls, usec/n, usec/calls)
	}
	fmt.Fprintf(&sb, "| inside commands the client sent | | | %.2f | |\n", inCmds/n)
	fmt.Fprintf(&sb, "| outside commands (event loop, I/O, parsing, replies) | | | %.2f | |\n", cpuMicros-inCmds/n)
	fmt.Fprintf(&sb, "| used_cpu (user+sys) | | | %.2f | |\n", cpuMicros)
	if a.cycles >= 0 && b.cycles > a.cycles {
		cycles := b.cycles - a.cycles
		fmt.Fprintf(&sb, "\nevent loop: %.3f wake-ups a decision (%.1f decisions a wake-up), %.2f µs a decision in them (%.1f µs a wake-up)\n",
			cycles/n, n/cycles, (b.loopUsec-a.loopUsec)/n, (b.loopUsec-a.loopUsec)/cycles)
	}
	if sent != nil {
		sent.mu.Lock()
		fmt.Fprintf(&sb, "client: %.3f round trips a decision (%.1f decisions a round trip)", float64(sent.roundTrips)/n, n/float64(sent.roundTrips))
		if m := sent.cmds["mget"]; m > 0 {
			fmt.Fprintf(&sb, "; %.1f decisions and %.1f keys a read (MGET)", n/float64(m), float64(sent.mgetKeys)/float64(m))
		}
		sb.WriteString("\nclient sent, a decision:")
		var sentNames []string
		for name := range sent.cmds {
			sentNames = append(sentNames, name)
		}
		sort.Strings(sentNames)
		for _, name := range sentNames {
			fmt.Fprintf(&sb, " %s %.3f;", name, float64(sent.cmds[name])/n)
		}
		sent.mu.Unlock()
		sb.WriteString("\n")
	}
	fmt.Print(sb.String())
}
