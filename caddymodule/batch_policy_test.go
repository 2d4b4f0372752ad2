package caddymodule_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
)

// TestBatchPolicy proves that quiet rules, exempt and cost apply per
// entry, each read at the entry's own message ({json.*.tz},
// {json.*.priority}, {json.*.n}): under drop, a recipient in its quiet
// range is dropped, an exempt one in the same range passes, and the
// others are counted at their own cost; under reject, the same batch is
// refused naming the quiet rule and every other entry refused, and
// nothing is recorded.
func TestBatchPolicy(t *testing.T) {
	up := startUpstream(t)
	span, _ := quietAround(t, "Asia/Tokyo")
	site := func(name, mode string) string {
		return fmt.Sprintf(`
	frequency_cap /push/send* {
		name %s
		key_prefix %s
		batch %s
		exempt {json.*.priority} otp
		dimension recipient {json.*.to}
		rule night {
			quiet %s {json.*.tz} UTC
			by    recipient
		}
		rule hour {
			by     recipient
			limit  10
			window 1h
			cost   {json.*.n}
		}
	}
	reverse_proxy %s`, name, testPrefix(), mode, span, up.addr())
	}
	body := `[{"to":"a","tz":"Asia/Tokyo","n":1},{"to":"b","n":3},{"to":"c","tz":"Asia/Tokyo","priority":"otp","n":2}]`

	name := batchName()
	g := startGateway(t, site(name, "drop"))
	a := g.post("/push/send", "application/json", body)
	expectStatus(t, a, http.StatusOK)
	if d := dropped(t, a); !slices.Equal(d, []string{"0.to"}) {
		t.Errorf("dropped %v, want [0.to]", d)
	}
	for r, used := range map[string]int64{"a": 0, "b": 3, "c": 2} {
		if u := usageOf(t, name, "recipient="+r)["hour"]; u.Used != used {
			t.Errorf("%s: hour used %d, want %d", r, u.Used, used)
		}
	}

	name = batchName()
	g.load(site(name, "reject"))
	r := g.post("/push/send", "application/json", body)
	expectStatus(t, r, http.StatusTooManyRequests)
	if p := r.batchDenial(t); p.Rule != "night" || len(p.Denied) != 1 || p.Denied[0].Path != "0.to" {
		t.Errorf("denial %s", r.body)
	}
	for _, who := range []string{"b", "c"} {
		if u := usageOf(t, name, "recipient="+who)["hour"]; u.Used != 0 {
			t.Errorf("%s: hour used %d after a refused batch", who, u.Used)
		}
	}

	// A quiet entry beside one its hour refuses: the 429 lists both (it
	// listed the quiet one alone, and the batch sent again without it
	// was refused again), and still nothing is recorded.
	expectStatus(t, g.post("/push/send", "application/json", `[{"to":"d","n":9}]`), http.StatusOK)
	r = g.post("/push/send", "application/json", `[{"to":"a","tz":"Asia/Tokyo","n":1},{"to":"d","n":2},{"to":"e","n":1}]`)
	expectStatus(t, r, http.StatusTooManyRequests)
	p := r.batchDenial(t)
	var paths []string
	for _, d := range p.Denied {
		paths = append(paths, d.Path+" "+d.Rule)
	}
	if !slices.Equal(paths, []string{"0.to night", "1.to hour"}) {
		t.Errorf("denied %v, want the quiet 0.to and d's 1.to: %s", paths, r.body)
	}
	for who, used := range map[string]int64{"d": 9, "e": 0} {
		if u := usageOf(t, name, "recipient="+who)["hour"]; u.Used != used {
			t.Errorf("%s: hour used %d after a refused batch, want %d", who, u.Used, used)
		}
	}
	// Every other entry admitted (the store records them, and they are
	// given back at once): nothing stays counted.
	r = g.post("/push/send", "application/json", `[{"to":"a","tz":"Asia/Tokyo","n":1},{"to":"e","n":4}]`)
	expectStatus(t, r, http.StatusTooManyRequests)
	if u := usageOf(t, name, "recipient=e")["hour"]; u.Used != 0 {
		t.Errorf("e: hour used %d after a batch only a quiet entry refused", u.Used)
	}
}

// TestBatchQuietStoreDown proves that a batch a quiet entry refuses under
// reject is refused whatever the store does: with Redis down and on_error
// allow, it passed whole (quiet entry and all) once the other entries went
// to the store for the answer; it is a 429 naming the quiet rule, and
// nothing reaches the upstream.
func TestBatchQuietStoreDown(t *testing.T) {
	up := startUpstream(t)
	g := quietStoreDownGateway(t, up, "reject")
	r := g.post("/push/send", "application/json", `[{"to":"a","tz":"Asia/Tokyo"},{"to":"b"}]`)
	expectStatus(t, r, http.StatusTooManyRequests)
	if p := r.batchDenial(t); p.Rule != "night" {
		t.Errorf("denial %s", r.body)
	}
	if n := up.count(); n != 0 {
		t.Errorf("the upstream got %d requests, want none", n)
	}
}

// TestBatchDropQuietStoreDown proves the same under drop: with Redis down
// and on_error allow, the entries a quiet range refuses are dropped and
// the rest pass (the whole batch passed, quiet entries and all, once an
// entry needed the store).
func TestBatchDropQuietStoreDown(t *testing.T) {
	up := startUpstream(t)
	g := quietStoreDownGateway(t, up, "drop")
	a := g.post("/push/send", "application/json", `[{"to":"a","tz":"Asia/Tokyo"},{"to":"b"}]`)
	expectStatus(t, a, http.StatusOK)
	if d := dropped(t, a); !slices.Equal(d, []string{"0.to"}) {
		t.Errorf("dropped %v, want the quiet 0.to", d)
	}
	if got := string(up.last().body); got != `[{"to":"b"}]` {
		t.Errorf("the upstream got %s, want the quiet entry dropped", got)
	}
	// Every entry quiet: refused, nothing sent.
	expectStatus(t, g.post("/push/send", "application/json", `[{"to":"a","tz":"Asia/Tokyo"}]`), http.StatusTooManyRequests)
}

// quietStoreDownGateway caps a batch of recipients in Tokyo's quiet range
// around now ({json.*.tz}) beside an hourly cap, under the batch mode
// given, on a Redis that is down, under on_error allow.
func quietStoreDownGateway(t *testing.T, up *upstream, mode string) *gateway {
	span, _ := quietAround(t, "Asia/Tokyo")
	return startGateway(t, fmt.Sprintf(`
	frequency_cap /push/send* {
		name %s
		key_prefix %s
		redis redis://127.0.0.1:%d/0
		on_error allow
		batch %s
		dimension recipient {json.*.to}
		rule night {
			quiet %s {json.*.tz} UTC
			by    recipient
		}
		rule hour {
			by     recipient
			limit  10
			window 1h
		}
	}
	reverse_proxy %s`, batchName(), testPrefix(), freePort(t), mode, span, up.addr()))
}
