package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv1"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv2"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// freqcapV2 is lua/freqcap.lua of format 2 (commit 0d2b0dc), frozen beside
// the frozen format 2 codec: the script a gateway of the previous version
// runs, with its wire (decision flags).
func freqcapV2(t *testing.T) *redis.Script {
	t.Helper()
	b, err := os.ReadFile("../internal/recordlog/testdata/freqcap_v2.lua")
	if err != nil {
		t.Fatal(err)
	}
	return redis.NewScript(string(b))
}

// decideV2 decides req as a gateway of format 2 does in its script.
func decideV2(ctx context.Context, c *redis.Client, script *redis.Script, prefix string, req *limiter.Request) (*limiter.Decision, error) {
	p := limiter.GetPlan()
	defer p.Release()
	if err := p.Build(prefix, req, req.Now); err != nil {
		return nil, err
	}
	now := req.Now.UnixMilli()
	var keys keyList
	specs := []byte{byte(len(p.Sections))}
	decs := []byte{1, 0}
	decs = recordlog.AppendUint(decs, uint64(now), 6)
	decs = append(decs, byte(len(p.Sections)), 0) // format 2: decision flags
	var ids []any
	for si := range p.Sections {
		s := &p.Sections[si]
		specs = recordlog.AppendUint(specs, uint64(s.Retention), 6)
		specs = recordlog.AppendUint(specs, uint64(s.Grain), 6)
		specs = append(specs, byte(s.R1-s.R0))
		for _, r := range p.Rules[s.R0:s.R1] {
			specs = recordlog.AppendUint(specs, uint64(r.Limit), 6)
			specs = recordlog.AppendUint(specs, uint64(r.Window), 6)
			if r.Window == 0 {
				for _, b := range r.Bounds {
					specs = recordlog.AppendUint(specs, uint64(b), 6)
				}
			}
		}
		decs = recordlog.AppendUint(decs, uint64(keys.index(string(p.Key(s)))), 2)
		decs = recordlog.AppendUint(decs, uint64(si+1), 2)
		decs = recordlog.AppendUint(decs, uint64(s.Cost), 6)
		ids = append(ids, string(p.Sub(s)))
	}
	v, err := script.Run(ctx, c, keys, append([]any{opDecide, specs, decs}, ids...)...).Result()
	if err != nil {
		return nil, err
	}
	rep, err := scriptInts(v)
	if err != nil {
		return nil, err
	}
	k := 2 + len(p.Sections)
	for si := range p.Sections {
		s := &p.Sections[si]
		s.Recorded = rep[2+si]
		for ri := s.R0; ri < s.R1; ri++ {
			p.Raw = append(p.Raw, recordlog.RawResult{Used: rep[k], Reset: rep[k+1], Retry: rep[k+2], Ok: rep[k+2] == 0})
			k += 3
		}
	}
	return p.Finish(req, now, rep[1] == 1), nil
}

// sameDecision fails the test unless got admits and counts as want does.
func sameDecision(t *testing.T, step, who string, got, want *limiter.Decision) {
	t.Helper()
	if got.Allowed != want.Allowed {
		t.Fatalf("%s: the %s admitted %v; the memory store %v", step, who, got.Allowed, want.Allowed)
	}
	for j := range want.Results {
		if g, w := got.Results[j], want.Results[j]; g.Used != w.Used || g.Denied != w.Denied {
			t.Fatalf("%s: the %s counts %s %d (denied %v); the memory store %d (%v)", step, who, w.Rule.Name, g.Used, g.Denied, w.Used, w.Denied)
		}
	}
}

// TestLayout3Upgrade is an upgrade as docs/operations.md has it, over one
// Redis: gateways of formats 1 and 2 (their frozen scripts, and format 1's
// Go codec) decide the seed config for a while, then gateways of this
// version (in Go and in the script) take over. This version counts the
// history the older ones wrote exactly as a memory store that saw every
// send; and once it has written a key, every older gateway refuses that
// key with an error, in the script and in Go, and leaves it unchanged:
// none ever counts a value of format 3.
func TestLayout3Upgrade(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t)
	const prefix = "layout3:"
	clock := &limitertest.FixedClock{T: time.Date(2026, 3, 9, 8, 0, 0, 0, time.UTC)}
	ref := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
	newGo := New(client, Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second, GoBatchMin: 1})
	newScript := New(client, Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second, ScriptOnly: true})
	t.Cleanup(func() { newGo.Close(); newScript.Close(); ref.Close() })
	old := &oldGateway{c: client, script: redis.NewScript(freqcapV1)}
	v2 := freqcapV2(t)
	rules := limitertest.SeedRules()
	rng := rand.New(rand.NewSource(3))
	request := func() *limiter.Request {
		clock.T = clock.T.Add(time.Duration(rng.Intn(40_000)) * time.Millisecond)
		return limitertest.Req(clock.T, limitertest.Vals{
			"recipient": fmt.Sprint("r", rng.Intn(3)),
			"content":   fmt.Sprint("c", rng.Intn(3)),
		}, rules...)
	}
	older := []string{"format 1 script", "format 1 Go", "format 2 script"}
	for i := 0; i < 240; i++ {
		req := request()
		want := limitertest.MustDecide(t, ref, req)
		var got *limiter.Decision
		var err error
		switch who := i % 3; who {
		case 2:
			got, err = decideV2(ctx, client, v2, prefix, req)
		default:
			got, err = old.decide(ctx, prefix, req, who == 1)
		}
		if err != nil {
			t.Fatalf("step %d: the %s: %v", i, older[i%3], err)
		}
		sameDecision(t, fmt.Sprint("step ", i), older[i%3], got, want)
	}
	newer := []*Store{newGo, newScript}
	for i := 0; i < 240; i++ {
		req := request()
		want := limitertest.MustDecide(t, ref, req)
		got, err := newer[i%2].Decide(ctx, req)
		if err != nil {
			t.Fatalf("step %d after the upgrade: %v", i, err)
		}
		sameDecision(t, fmt.Sprint("step ", i, " after the upgrade"), []string{"newer in Go", "newer in the script"}[i%2], got, want)
	}
	keys, err := client.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 3 {
		t.Fatalf("keys %v, %v; want the 3 recipients'", keys, err)
	}
	for _, key := range keys {
		oldRefuse(t, client, key, old.script, v2)
	}
	req := request()
	for who := 0; who < 3; who++ {
		var err error
		if who == 2 {
			_, err = decideV2(ctx, client, v2, prefix, req)
		} else {
			_, err = old.decide(ctx, prefix, req, who == 1)
		}
		if err == nil {
			t.Fatalf("the %s decided over values of format 3", older[who])
		}
	}
}

// oldRefuse fails the test unless every older reader refuses key's value
// with an error and leaves it as it was: format 1's and 2's Go codecs, and
// their scripts (a reset, whose first step reads the key).
func oldRefuse(t *testing.T, c *redis.Client, key string, scripts ...*redis.Script) {
	t.Helper()
	ctx := context.Background()
	b, err := c.Get(ctx, key).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	var k1 recordlogv1.KeyLogs
	var k2 recordlogv2.KeyLogs
	if recordlogv1.DecodeBlob(b, &k1) == nil || recordlogv2.DecodeBlob(b, &k2) == nil {
		t.Fatalf("key %s: an older Go codec reads %x", key, b)
	}
	for i, s := range scripts {
		err := s.Run(ctx, c, []string{key}, opReset, 0, 1, 1, "").Err()
		if err == nil {
			t.Fatalf("key %s: older script %d reads %x", key, i, b)
		}
		t.Logf("key %s (%d bytes): older script %d: %v", key, len(b), i, err)
		if after, _ := c.Get(ctx, key).Bytes(); !bytes.Equal(after, b) {
			t.Fatalf("key %s: older script %d changed %x to %x", key, i, b, after)
		}
	}
}

// TestLayout3LongLog decides 700 sends of one recipient, 4 s apart, under
// a limit of 900 an hour (every record kept, no buckets), in Go and in the
// script by turns: a log past 255 records (the count's second byte) and a
// value of several kilobytes decide as the memory store does, and the
// older gateways refuse the value.
func TestLayout3LongLog(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t)
	const prefix = "layout3long:"
	clock := &limitertest.FixedClock{T: time.Date(2026, 3, 9, 8, 0, 0, 0, time.UTC)}
	ref := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
	newGo := New(client, Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second, GoBatchMin: 1})
	newScript := New(client, Options{Prefix: prefix, Now: clock.Now, Timeout: 2 * time.Second, ScriptOnly: true})
	t.Cleanup(func() { newGo.Close(); newScript.Close(); ref.Close() })
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 900, Window: limiter.Window{Duration: time.Hour}}
	rng := rand.New(rand.NewSource(5))
	for i := 0; i < 700; i++ {
		clock.T = clock.T.Add(time.Duration(3000+rng.Intn(2000)) * time.Millisecond)
		req := limitertest.Req(clock.T, limitertest.Vals{"recipient": "amy"}, rule)
		want := limitertest.MustDecide(t, ref, req)
		got, err := []*Store{newGo, newScript}[i%2].Decide(ctx, req)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		sameDecision(t, fmt.Sprint("send ", i), []string{"newer in Go", "newer in the script"}[i%2], got, want)
	}
	keys, err := client.Keys(ctx, prefix+"*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v, %v", keys, err)
	}
	oldRefuse(t, client, keys[0], redis.NewScript(freqcapV1), freqcapV2(t))
}
