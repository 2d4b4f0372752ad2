package caddymodule

import (
	"encoding/json"
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// A cap set's key heads are the first dimensions its counting rules keep
// records under, each once, the rules without by under theirs; a quiet
// rule keeps none.
func TestKeyHeads(t *testing.T) {
	h := &Handler{rules: []compiledRule{
		{rule: &limiter.Rule{Name: "minute", By: []string{"recipient"}}},
		{rule: &limiter.Rule{Name: "same", By: []string{"recipient", "content"}}},
		{rule: &limiter.Rule{Name: "all", By: []string{globalDimension}}},
		{rule: &limiter.Rule{Name: "campaign", By: []string{"campaign", "recipient"}}},
		{rule: &limiter.Rule{Name: "night", Quiet: &limiter.Quiet{}}},
	}}
	if got, want := h.keyHeads(), []string{"recipient", globalDimension, "campaign"}; !slices.Equal(got, want) {
		t.Fatalf("key heads %v, want %v", got, want)
	}
}

// Two cap sets on one store and prefix are told the dimensions their
// rules share keys under, each naming the other; the same cap set
// provisioned again (a reload) shares nothing with itself, and a cap set
// gone is forgotten.
func TestStoreUsersTellSharedKeys(t *testing.T) {
	var u storeUsers
	if shared := u.add("push", []string{"recipient", globalDimension}); shared != nil {
		t.Fatalf("the first cap set shares %v", shared)
	}
	shared := u.add("sms", []string{"channel", "recipient", globalDimension})
	if len(shared) != 1 || !slices.Equal(shared["push"], []string{"recipient", globalDimension}) {
		t.Fatalf("sms shares %v, want recipient and the rules without by with push", shared)
	}
	if shared := u.add("sms", []string{"channel"}); shared != nil {
		t.Fatalf("sms reloaded with rules by channel alone shares %v", shared)
	}
	u.remove("push")
	if shared := u.add("mail", []string{"recipient"}); shared != nil {
		t.Fatalf("mail shares %v after push left (sms keeps only channel)", shared)
	}
}

// The warning names both cap sets, the prefix and the shared dimensions,
// the rules without by in words.
func TestSharedKeysWarning(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h := &Handler{Name: "sms", KeyPrefix: "freqcap:", logger: zap.New(core)}
	h.warnSharedKeys(map[string][]string{"push": {"freqcap:recipient", "freqcap:" + globalDimension}})
	lines := logs.All()
	if len(lines) != 1 || lines[0].Level != zapcore.WarnLevel {
		t.Fatalf("logged %v, want one warning", lines)
	}
	f := lines[0].ContextMap()
	dims, _ := f["dimensions"].([]any)
	keys, _ := f["keys"].([]any)
	if f["handler"] != "sms" || f["other"] != "push" || f["key_prefix"] != "freqcap:" || len(dims) != 2 || dims[0] != "recipient" || dims[1] != "the rules without by" ||
		len(keys) != 2 || keys[0] != "freqcap:recipient{…}" {
		t.Fatalf("fields %v", f)
	}
}

// Two prefixes and dimension names can spell one key: key_prefix "fc"
// with dimension s.to and "fcs." with to both keep records under
// fcs.to{<value>}, so on one Redis each counts the other's sends. The
// cap sets are compared by the keys' heads spelt whole (before, by
// prefix, and nothing warned); prefixes apart stay apart.
func TestSharedKeysAcrossPrefixes(t *testing.T) {
	set := func(prefix, dim string) *Handler {
		return &Handler{KeyPrefix: prefix, rules: []compiledRule{{rule: &limiter.Rule{Name: "day", By: []string{dim}}}}}
	}
	var cfg redisstore.Config
	space := cfg.KeySpace("")
	ks := &keySpaceUsers{m: map[string]*storeUsers{}}
	ks.add(space, "a", set("fc", "s.to").keyHeadsSpelt())
	if shared := ks.add(space, "b", set("fcs.", "to").keyHeadsSpelt()); !slices.Equal(shared["a"], []string{"fcs.to"}) {
		t.Errorf("b shares %v, want fcs.to with a", shared)
	}
	if shared := ks.add(space, "c", set("fc:", "to").keyHeadsSpelt()); shared != nil {
		t.Errorf("c, on a prefix of its own, shares %v", shared)
	}
}

// Provisioning two cap sets on the memory store and the default prefix
// records each one's key heads on the store they share.
func TestProvisionRecordsKeyHeads(t *testing.T) {
	push, err := load(t, `{"name": "push-heads", "key_prefix": "heads:", "dimensions": {"recipient": "{json.to}"},
		"rules": [{"name": "day", "by": ["recipient"], "limit": 50, "window": "24h"}, {"name": "all", "limit": 100, "window": "1h"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := load(t, `{"name": "sms-heads", "key_prefix": "heads:", "dimensions": {"recipient": "{json.to}"},
		"rules": [{"name": "day", "by": ["recipient"], "limit": 3, "window": "24h"}]}`); err != nil {
		t.Fatal(err)
	}
	found := false
	stores.Range(func(key, value any) bool {
		if key != push.storeKey {
			return true
		}
		found = true
		p := value.(*pooledStore)
		p.mu.Lock()
		defer p.mu.Unlock()
		if !slices.Equal(p.heads["push-heads"], []string{"recipient", globalDimension}) || !slices.Equal(p.heads["sms-heads"], []string{"recipient"}) {
			t.Errorf("heads %v", p.heads)
		}
		return false
	})
	if !found {
		t.Fatal("no pooled store for the cap sets")
	}
}

// One Redis spelled two ways (a URL and an address, localhost and
// 127.0.0.1, other timeouts) is two pooled stores but one key space: the
// warning names the cap sets that share keys there (before, nothing
// warned, and each counted the other's sends). Another db or prefix is
// another key space.
func TestKeySpaceSpelledOtherwise(t *testing.T) {
	spaces := map[string]string{
		`{"url": "redis://127.0.0.1:6399/5"}`:                                  "",
		`{"addresses": ["localhost:6399"], "db": 5, "timeout": 200000000}`:     "",
		`{"addresses": ["LOCALHOST:6399"], "db": 5, "pool_size": 7}`:           "",
		`{"addresses": ["127.0.0.1:6399"], "db": 4}`:                           "db 4",
		`{"addresses": ["127.0.0.1:6400"], "db": 5}`:                           "port 6400",
		`{"addresses": ["127.0.0.1:6399", "127.0.0.2:6399"], "cluster": true}`: "cluster",
		`{"addresses": ["127.0.0.2:6399", "127.0.0.1:6399"], "cluster": true}`: "cluster",
	}
	got := map[string]string{}
	for js, want := range spaces {
		var cfg redisstore.Config
		if err := json.Unmarshal([]byte(js), &cfg); err != nil {
			t.Fatal(err)
		}
		space := cfg.KeySpace("freqcap:")
		if other, ok := got[want]; ok && other != space {
			t.Errorf("%s: key space %s, want %s's", js, space, want)
		}
		got[want] = space
	}
	if len(got) != 4 {
		t.Errorf("%d key spaces, want 4 (%v)", len(got), got)
	}

	ks := &keySpaceUsers{m: map[string]*storeUsers{}}
	ks.add(got[""], "push", []string{"recipient"})
	if shared := ks.add(got[""], "sms", []string{"recipient"}); len(shared["push"]) != 1 {
		t.Errorf("sms on the same Redis spelt otherwise shares %v, want recipient with push", shared)
	}
	if shared := ks.add(got["db 4"], "mail", []string{"recipient"}); shared != nil {
		t.Errorf("mail on db 4 shares %v", shared)
	}
	ks.remove(got[""], "push")
	ks.remove(got[""], "sms")
	if _, ok := ks.m[got[""]]; ok {
		t.Error("a key space whose cap sets are gone is kept")
	}
}
