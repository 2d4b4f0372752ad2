package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// Values full of separators cannot forge another tuple's key or sub-log:
// every pair of distinct tuples here maps to distinct (key, sub-log) pairs.
func TestKeysAreInjective(t *testing.T) {
	tuples := [][]string{
		{"a", "b"}, {"a&b", ""}, {"a", "&b"}, {"a}", "b"}, {"a", "b$w"}, {"a{x}", "b"},
		{"a%7D", "b"}, {"a}", "b"}, {"#abc", "b"}, {strings.Repeat("x", 65), "b"},
		{strings.Repeat("x", 64), "b"}, {"a=b", "c"}, {"a", "b=c"}, {"", ""}, {" ", "b"}, {"a\x00", "b"},
	}
	rule := &limiter.Rule{Name: "r", By: []string{"recipient", "content"}, Limit: 1, Window: limiter.Window{Duration: time.Second}}
	seen := map[string][]string{}
	for _, tu := range tuples {
		id := limiter.KeyFor("p:", rule.By[0], tu[0]) + "\x00" + limiter.SubOf(rule, tu)
		if prev, ok := seen[id]; ok && (prev[0] != tu[0] || prev[1] != tu[1]) {
			t.Fatalf("%q and %q share key %q", prev, tu, id)
		}
		seen[id] = tu
	}
}

// The first dimension's value is the hash tag, escaped so that it cannot end
// early; a value over 64 bytes is replaced by a hash.
func TestKeyShape(t *testing.T) {
	for _, c := range []struct{ value, key string }{
		{"alice", "fc:recipient{alice}"},
		{"a}b{c", "fc:recipient{a%7Db%7Bc}"},
		{"白", "fc:recipient{白}"},
		{strings.Repeat("z", 65), "fc:recipient{#57685f5e43ddac1567f4d404c357c44b}"}, // sha256, first 128 bits,
	} {
		got := limiter.KeyFor("fc:", "recipient", c.value)
		if got != c.key {
			t.Errorf("keyFor(%q) = %q, want %q", c.value, got, c.key)
		}
		if tag := hashTag(got); strings.ContainsAny(tag, "{}") {
			t.Errorf("hash tag of %q is %q", got, tag)
		}
	}
	seed := limitertest.SeedRules()
	if a, b := limiter.KeyFor("", seed[0].By[0], "x"), limiter.KeyFor("", seed[2].By[0], "x"); a != b {
		t.Errorf("rules about one recipient use keys %q and %q; want one key", a, b)
	}
	r1 := &limiter.Rule{Name: "a", By: []string{"recipient", "channel", "content"}}
	r2 := &limiter.Rule{Name: "b", By: []string{"recipient", "content", "channel"}}
	if a, b := limiter.SubOf(r1, []string{"u", "sms", "hi"}), limiter.SubOf(r2, []string{"u", "hi", "sms"}); a != b {
		t.Errorf("rules over the same dimensions in another order use sub-logs %q and %q", a, b)
	}
}

// Every key written to Redis has a TTL, so idle recipients disappear.
func TestRedisKeysExpire(t *testing.T) {
	c := redistest.Client(t)
	s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1})
	rules := limitertest.SeedRules()
	if _, err := s.Decide(context.Background(), limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "ttl", "content": "x"}, rules...)); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %v %v; want one key for all four rules of one recipient", keys, err)
	}
	ttl := c.PTTL(context.Background(), keys[0]).Val()
	if ttl <= 24*time.Hour || ttl > 24*time.Hour+2*time.Minute {
		t.Fatalf("TTL %s; want the longest window (24h) plus the slack", ttl)
	}
}
