package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv1"
)

// freqcapV1 is lua/freqcap.lua before exempt marks (commit 1a3f583):
// the script a gateway of the older version runs, with its wire (no
// decision flags).
//
//go:embed testdata/freqcap_v1.lua
var freqcapV1 string

// oldGateway decides, refunds and resets as a gateway of the older version
// does: in its script (format 1, its wire), or in Go with the format 1
// codec, reading and writing each key whole (the Go path's compare-and-set
// is left out: the test runs one step at a time).
type oldGateway struct {
	c      *redis.Client
	script *redis.Script
}

func (o *oldGateway) decide(ctx context.Context, prefix string, req *limiter.Request, inGo bool) (*limiter.Decision, error) {
	p := limiter.GetPlan()
	defer p.Release()
	if err := p.Build(prefix, req, req.Now); err != nil {
		return nil, err
	}
	now := req.Now.UnixMilli()
	var admitted bool
	var err error
	if inGo {
		admitted, err = o.decideInGo(ctx, p, now)
	} else {
		admitted, err = o.decideInScript(ctx, p, now)
	}
	if err != nil {
		return nil, err
	}
	return p.Finish(req, now, admitted), nil
}

// decideInScript runs the format 1 script over the plan, one spec per
// section, packed as its header says.
func (o *oldGateway) decideInScript(ctx context.Context, p *limiter.Plan, now int64) (bool, error) {
	var keys keyList
	specs := []byte{byte(len(p.Sections))}
	decs := []byte{1, 0}
	decs = recordlog.AppendUint(decs, uint64(now), 6)
	decs = append(decs, byte(len(p.Sections))) // format 1: no flags
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
	v, err := o.script.Run(ctx, o.c, keys, append([]any{opDecide, specs, decs}, ids...)...).Result()
	if err != nil {
		return false, err
	}
	rep, err := scriptInts(v)
	if err != nil {
		return false, err
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
	return rep[1] == 1, nil
}

// decideInGo decides the plan with the format 1 algorithm over the
// values read, and writes back what it recorded.
func (o *oldGateway) decideInGo(ctx context.Context, p *limiter.Plan, now int64) (bool, error) {
	logs := map[string]*recordlogv1.KeyLogs{}
	for si := range p.Sections {
		key := string(p.Key(&p.Sections[si]))
		if logs[key] != nil {
			continue
		}
		k, err := o.read(ctx, key, now)
		if err != nil {
			return false, err
		}
		logs[key] = k
	}
	admitted := true
	for si := range p.Sections {
		s := &p.Sections[si]
		l := logs[string(p.Key(s))].Find(p.Sub(s))
		if l == nil {
			l = &recordlogv1.SubLog{}
		}
		for _, r := range p.Rules[s.R0:s.R1] {
			raw, err := l.Evaluate(&recordlogv1.LogRule{Limit: r.Limit, Window: r.Window, Bounds: r.Bounds}, s.Cost, now)
			if err != nil {
				return false, err
			}
			admitted = admitted && raw.Ok
			p.Raw = append(p.Raw, recordlog.RawResult{Used: raw.Used, Reset: raw.Reset, Retry: raw.Retry, Ok: raw.Ok})
		}
	}
	if !admitted {
		return false, nil
	}
	for si := range p.Sections {
		s := &p.Sections[si]
		if s.Cost == 0 {
			continue
		}
		k := logs[string(p.Key(s))]
		l := k.Sub(p.Sub(s))
		l.Retention = s.Retention
		s.Recorded = l.Record(now, s.Cost, s.Grain)
		for ri := s.R0; ri < s.R1; ri++ {
			raw := recordlogv1.RawResult{Used: p.Raw[ri].Used, Reset: p.Raw[ri].Reset}
			l.AfterRecord(&recordlogv1.LogRule{Limit: p.Rules[ri].Limit, Window: p.Rules[ri].Window}, &raw, s.Cost, now)
			p.Raw[ri].Used, p.Raw[ri].Reset = raw.Used, raw.Reset
		}
		k.RefreshExpiry()
	}
	return true, o.write(ctx, logs, now)
}

func (o *oldGateway) read(ctx context.Context, key string, now int64) (*recordlogv1.KeyLogs, error) {
	k := new(recordlogv1.KeyLogs)
	b, err := o.c.Get(ctx, key).Bytes()
	if err == redis.Nil {
		return k, nil
	}
	if err != nil {
		return nil, err
	}
	if err := recordlogv1.DecodeBlob(b, k); err != nil {
		return nil, fmt.Errorf("format 1 cannot read key %q: %w", key, err)
	}
	k.Prune(now)
	return k, nil
}

func (o *oldGateway) write(ctx context.Context, logs map[string]*recordlogv1.KeyLogs, now int64) error {
	for key, k := range logs {
		k.Prune(now)
		k.RefreshExpiry()
		b, err := recordlogv1.EncodeBlob(nil, k)
		if err != nil {
			return err
		}
		if len(b) == 0 {
			err = o.c.Del(ctx, key).Err()
		} else {
			err = o.c.Set(ctx, key, b, time.Duration(k.ExpireAt-now)*time.Millisecond).Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TestLaterLayoutRefused: a sub-log whose header sets a flag reserved for a
// later layout (the room left for one) is refused by the newer version in
// Go and in the script alike, never read as counts.
func TestLaterLayoutRefused(t *testing.T) {
	ctx := context.Background()
	client := redistest.Client(t)
	const prefix = "later:"
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	rule := &limiter.Rule{Name: "r", By: []string{"r"}, Limit: 5, Window: limiter.Window{Duration: time.Minute}}
	// A format 1 value of one record; then flag 128 set in its header.
	var k recordlogv1.KeyLogs
	l := k.Sub(nil)
	l.Retention = 60_000
	l.Record(now.UnixMilli()-1000, 1, 0)
	b, err := recordlogv1.EncodeBlob(nil, &k)
	if err != nil {
		t.Fatal(err)
	}
	b[1+3] |= 128 // the empty id's zero, the retention, then the flags
	key := limiter.KeyFor(prefix, "r", "amy")
	if err := client.Set(ctx, key, b, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for _, scriptOnly := range []bool{false, true} {
		s := New(client, Options{Prefix: prefix, Timeout: 2 * time.Second, ScriptOnly: scriptOnly, GoBatchMin: 1})
		t.Cleanup(func() { s.Close() })
		d, err := s.Decide(ctx, limitertest.Req(now, limitertest.Vals{"r": "amy"}, rule))
		if err == nil || !strings.Contains(err.Error(), "corrupt") && !strings.Contains(err.Error(), "CORRUPT") {
			t.Errorf("script only %v: a later layout decided %+v, %v", scriptOnly, d, err)
		}
	}
}
