package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestConditionGoesWhole proves that under batch drop the topics of one
// FCM condition are sent or dropped together, and that what a dropped
// condition's admitted topics recorded is given back: a condition naming
// a capped topic is taken out of its notification, its other topics are
// reported capped beside it and stay free to send to; a send left with
// nothing to deliver is answered by the gateway alone, as a fully capped
// one is, and records nothing. On the memory store and on Redis.
func TestConditionGoesWhole(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startGorush(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap /api/push {
		key_prefix %s
		%s
		batch drop
		answer gorush
		dimension token {json.notifications.*.tokens.*} {json.notifications.*.to} {fcm_topic.notifications.*[platform!=1].topic} {fcm_topics.notifications.*[platform!=1].condition}
		rule token_minute {
			by     token
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), redisLine, up.addr()))
		const push = "/api/push"
		send := func(body string, status int) *answer {
			t.Helper()
			a := g.post(push, "application/json", body)
			expectStatus(t, a, status)
			return a
		}
		topic := func(name string) string {
			return fmt.Sprintf(`{"notifications":[{"platform":2,"topic":%q,"message":"m"}]}`, name)
		}
		send(topic("t"), http.StatusOK) // t's one send of the minute

		// A token beside a condition over t and u: the token goes on, the
		// condition does not, and u is reported with t.
		refunds := func() float64 {
			s, _ := scrape(t)
			return s[series("caddy_frequency_cap_refunds_total", "handler", "default")]
		}
		refunded := refunds()
		sent := len(up.received())
		a := send(`{"notifications":[{"tokens":["k"],"platform":2,"condition":"'t' in topics || 'u' in topics","message":"m"}]}`, http.StatusOK)
		bodies := up.received()
		if len(bodies) != sent+1 || string(bodies[len(bodies)-1]) != `{"notifications":[{"tokens":["k"],"platform":2,"message":"m"}]}` {
			t.Fatalf("gorush got %q", bodies[sent:])
		}
		if got := gorushOf(t, a); got.Counts != 3 || fmt.Sprint(cappedBy(got, "token_minute")) != "[t u]" {
			t.Errorf("a condition with a capped topic: %s, want counts 3 and t and u capped by token_minute", a.body)
		}
		if got := dropped(t, a); fmt.Sprint(got) != "[notifications.0.condition]" {
			t.Errorf("dropped %v", got)
		}
		// u recorded nothing: it was not sent to. Nor was it a refund:
		// no upstream failed it (refunds_total counted it, and an alert
		// on refunds read a condition's topics as failed sends).
		if got := refunds(); got != refunded {
			t.Errorf("refunds_total went from %v to %v for a condition dropped", refunded, got)
		}
		send(topic("u"), http.StatusOK)
		if got := string(up.received()[len(up.received())-1]); got != topic("u") {
			t.Errorf("u's own send after its condition was dropped: gorush got %s", got)
		}

		// Only a condition, one of its topics capped: nothing is left to
		// send, so the gateway answers, and v stays free.
		sent = len(up.received())
		a = send(`{"notifications":[{"platform":2,"condition":"'v' in topics && 't' in topics","message":"m"}]}`, http.StatusOK)
		if got := gorushOf(t, a); got.Counts != 2 || len(got.Logs) != 2 {
			t.Errorf("a condition left nothing to send: %s, want gorush's answer with 2 failed pushes", a.body)
		}
		if a.header.Get("Retry-After") == "" {
			t.Errorf("nothing left to send: no Retry-After in %v", a.header)
		}
		if len(up.received()) != sent {
			t.Errorf("a send with nothing left reached gorush: %q", up.received()[sent:])
		}
		send(topic("v"), http.StatusOK)
		if got := string(up.received()[len(up.received())-1]); got != topic("v") {
			t.Errorf("v's own send after its condition was refused: gorush got %s", got)
		}
		// And t is still capped.
		a = send(topic("t"), http.StatusOK)
		if got := gorushOf(t, a); fmt.Sprint(cappedBy(got, "token_minute")) != "[t]" {
			t.Errorf("t again: %s", a.body)
		}

		// In the default answer, a send left with nothing lists every
		// entry that went, the topics that went along by their fellow's
		// rule.
		g.load(fmt.Sprintf(`
	frequency_cap /api/push {
		key_prefix %s
		%s
		batch drop
		dimension token {json.notifications.*.tokens.*} {fcm_topics.notifications.*[platform!=1].condition}
		rule token_minute {
			by     token
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), redisLine, up.addr()))
		x := unique("x")
		send(fmt.Sprintf(`{"notifications":[{"tokens":[%q],"platform":2}]}`, x), http.StatusOK)
		a = send(fmt.Sprintf(`{"notifications":[{"platform":2,"condition":"'%s' in topics || 'w' in topics"}]}`, x), http.StatusTooManyRequests)
		var p struct {
			Detail string `json:"detail"`
			Denied []struct {
				Path string `json:"path"`
				Rule string `json:"rule"`
			} `json:"denied"`
		}
		if err := json.Unmarshal(a.body, &p); err != nil || len(p.Denied) != 2 || p.Denied[1].Rule != "token_minute" || !strings.HasPrefix(p.Detail, "2 of 2 entries denied") {
			t.Errorf("nothing left, problem+json: %s (%v)", a.body, err)
		}
	})
}

// TestDroppedConditionQuotaLeavesItsTopicsOut proves that a batch send
// left with nothing under drop, its condition's free topic given back,
// reports that topic's quota without it: a probe was told r_content had
// nothing left for a topic that had recorded nothing, and its next send
// of that content passed.
func TestDroppedConditionQuotaLeavesItsTopicsOut(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		batch drop
		dimension topic {fcm_topics.message.condition}
		dimension content {json.message.body}
		rule per_topic {
			by     topic
			limit  3
			window 1m
		}
		rule per_content {
			by     topic content
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))
	for i := range 3 {
		expectStatus(t, g.post("/", "application/json", fmt.Sprintf(`{"message":{"condition":"'t1' in topics","body":"b%d"}}`, i)), http.StatusOK)
	}
	a := g.post("/", "application/json", `{"message":{"condition":"'t1' in topics || 't2' in topics","body":"C"}}`)
	expectStatus(t, a, http.StatusTooManyRequests)
	if rl := a.header.Get("RateLimit"); !strings.Contains(rl, `"per_content";r=1`) {
		t.Errorf("RateLimit %q; want per_content with 1 left: t2 recorded nothing", rl)
	}
	expectStatus(t, g.post("/", "application/json", `{"message":{"condition":"'t2' in topics","body":"C"}}`), http.StatusOK)
}
