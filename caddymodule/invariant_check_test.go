package caddymodule_test

import (
	"net/http"
	"sort"
	"testing"
	"time"
)

// span is when one message may have been decided: after it was sent, before
// it arrived (local clock).
type span struct{ sent, at time.Time }

// checkInvariants proves, from what the upstream received and what the
// senders saw, that
//
//   - no rule admitted more than its limit in any window: for no rule and
//     key (recipient, or recipient and content) did limit+1 messages all
//     leave their senders and reach the upstream within less than the
//     window; and
//   - every 429 was deserved: for every rule its body names as violated, at
//     least limit messages of that key may have been counted in its window
//     at the moment of the decision.
//
// Clock tolerance: the store decides a message by Redis's clock at some
// moment between its send time and its arrival at the upstream; the checker
// sees only those two, on the local clock (the offset to Redis's clock
// cancels out, as the engine compares Redis times with Redis times). So
// each message carries its own tolerance, its send-to-arrival time, which
// is measured and reported: a group of limit+1 messages is a certain
// over-admission when the latest arrival minus the earliest send is under
// the window, and a message may count for a 429 decided within [s, e] when
// it was sent by e and arrived after s-window-slack, where slack is limit
// ms (a record is stamped at its decision time or, when several land in
// one millisecond, up to one ms per record later).
//
// Requests that got neither 200 nor 429 (store timeouts answered 503 under
// on_error deny, transport errors) may have been recorded without being
// delivered: they count as possibly recorded in the 429 check. They take
// nothing from the proof, but a run where many fail proves little, so
// they must stay under 10% of the requests. (On an idle machine there are
// none; on one overloaded several times over, store calls have been seen
// to pass the 3 s timeout.)
func checkInvariants(t *testing.T, got []delivery, others []outcome, sent int64) {
	t.Helper()
	keyOf := func(r *invRule, to, content string) string {
		if r.byContent {
			return to + "\x00" + content
		}
		return to
	}
	setOf := func(path string) *invSet {
		for i := range invSets {
			if invSets[i].path == path {
				return &invSets[i]
			}
		}
		t.Fatalf("unknown path %q", path)
		return nil
	}
	type ruleKey struct{ set, rule, key string }
	// delivered and undelivered, by rule and key: the spans of messages
	// delivered, and of requests that failed (and may have been recorded).
	delivered := map[ruleKey][]span{}
	undelivered := map[ruleKey][]span{}
	lat := make([]time.Duration, 0, len(got))
	for _, d := range got {
		lat = append(lat, d.at.Sub(d.sent))
		s := setOf(d.set)
		for i := range s.rules {
			k := ruleKey{s.path, s.rules[i].name, keyOf(&s.rules[i], d.to, d.content)}
			delivered[k] = append(delivered[k], span{d.sent, d.at})
		}
	}
	// denied counts the rule a 429 names (the one that frees up last),
	// violated every rule it lists as refusing.
	denied, violatedBy := map[string]int{}, map[string]int{}
	var denials, unexplained int
	var failed []outcome
	for _, o := range others {
		if o.status == http.StatusTooManyRequests && o.what == "" {
			denials++
			denied[o.set+" "+o.rule]++
			continue
		}
		failed = append(failed, o)
		s := setOf(o.set)
		for i := range s.rules {
			k := ruleKey{s.path, s.rules[i].name, keyOf(&s.rules[i], o.to, o.content)}
			undelivered[k] = append(undelivered[k], span{o.start, o.end})
		}
	}
	if len(failed) > 0 {
		t.Logf("%d requests neither admitted nor denied, e.g. %d %q", len(failed), failed[0].status, tail([]byte(failed[0].what), 200))
	}
	if int64(len(failed))*10 > sent {
		t.Errorf("%d of %d requests failed, more than 10%%", len(failed), sent)
	}

	for _, o := range others {
		if o.status != http.StatusTooManyRequests || o.what != "" {
			continue
		}
		s := setOf(o.set)
		named := false
		for _, v := range o.violated {
			named = named || v.Rule == o.rule
			violatedBy[o.set+" "+v.Rule]++
			var r *invRule
			for i := range s.rules {
				if s.rules[i].name == v.Rule {
					r = &s.rules[i]
				}
			}
			if r == nil {
				t.Errorf("a 429 on %s names rule %q, not one of the set", o.set, v.Rule)
				continue
			}
			if v.Limit != int64(r.limit) || v.Used < v.Limit {
				t.Errorf("a 429 on %s for %s reports %s used %d of %d", o.set, o.to, v.Rule, v.Used, v.Limit)
			}
			k := ruleKey{s.path, r.name, keyOf(r, o.to, o.content)}
			after := o.start.Add(-r.window - time.Duration(r.limit)*time.Millisecond)
			n := mayCount(delivered[k], after, o.end)
			maybe := mayCount(undelivered[k], after, o.end)
			if n+maybe < r.limit {
				unexplained++
				if unexplained <= 5 {
					t.Errorf("a 429 on %s for %s %q by %s (limit %d in %s) decided in [%s, %s]: only %d messages (and %d failed requests) may count in its window",
						o.set, o.to, o.content, r.name, r.limit, r.window, o.start.Format("15:04:05.000"), o.end.Format("15:04:05.000"), n, maybe)
				}
			}
		}
		if !named {
			t.Errorf("a 429's rule %q is not among its violated rules %+v", o.rule, o.violated)
		}
	}

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("send-to-arrival (each message's clock tolerance): p50 %s, p99 %s, max %s; %d denials checked, %d unexplained",
		percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1), denials, unexplained)
	for _, s := range invSets {
		for _, r := range s.rules {
			arrived, certain := 0, 0
			for k, spans := range delivered {
				if k.set != s.path || k.rule != r.name {
					continue
				}
				arrived = max(arrived, mostArrivedWithin(spans, r.window))
				certain = max(certain, mostDecidedWithin(spans, r.window))
			}
			t.Logf("  %-4s %-17s limit %2d per %-8s: denied %5d (violated in %5d); most arrivals in a window %2d, most surely decided in one %2d",
				s.name, r.name, r.limit, r.window, denied[s.path+" "+r.name], violatedBy[s.path+" "+r.name], arrived, certain)
			if certain > r.limit {
				t.Errorf("%s %s: %d messages were sent and delivered within less than %s, over its limit %d",
					s.name, r.name, certain, r.window, r.limit)
			}
		}
	}
}

// mostArrivedWithin returns the most spans whose arrivals fall within less
// than w of each other: what a sliding window of w over the upstream's
// receive times counts at most. Only reported: delivery jitter can push it
// over a limit that the decisions kept.
func mostArrivedWithin(spans []span, w time.Duration) int {
	times := make([]time.Time, len(spans))
	for i, s := range spans {
		times[i] = s.at
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	most, i := 0, 0
	for j := range times {
		for times[j].Sub(times[i]) >= w {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// mostDecidedWithin returns the largest group of spans whose latest
// arrival minus earliest send is under w: their decisions, each between its
// send and its arrival, certainly fell within less than w of each other.
// Its earliest send is some span's; for each candidate, the group is every
// span sent no earlier and arrived before that send plus w.
func mostDecidedWithin(spans []span, w time.Duration) int {
	most := 0
	for _, first := range spans {
		n := 0
		for _, s := range spans {
			if !s.sent.Before(first.sent) && s.at.Sub(first.sent) < w {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// mayCount counts the spans that a decision at some moment in [s, e] may
// have counted in a window that starts after after (s-window-slack): sent
// by e, arrived after after.
func mayCount(spans []span, after, e time.Time) int {
	n := 0
	for _, s := range spans {
		if !s.sent.After(e) && s.at.After(after) {
			n++
		}
	}
	return n
}

// TestInvariantChecker pins the checker's window arithmetic on explicit
// times (ms after t0).
func TestInvariantChecker(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Millisecond) }
	spans := func(pairs ...[2]int) []span {
		var out []span
		for _, p := range pairs {
			out = append(out, span{ms(p[0]), ms(p[1])})
		}
		return out
	}
	for _, tc := range []struct {
		name             string
		spans            []span
		arrived, decided int
	}{
		{"none", nil, 0, 0},
		{"one", spans([2]int{0, 10}), 1, 1},
		{"within", spans([2]int{0, 10}, [2]int{900, 990}), 2, 2},
		// (now-w, now]: a record w old has left the window.
		{"arrivals w apart", spans([2]int{0, 10}, [2]int{990, 1010}), 1, 1},
		// Arrived 900 ms apart, but sent 1000 ms apart: the decisions
		// may have been a full window apart.
		{"jitter", spans([2]int{0, 100}, [2]int{995, 1000}), 2, 1},
		{"slow one", spans([2]int{0, 10}, [2]int{20, 30}, [2]int{40, 1200}), 2, 2},
		{"later group", spans([2]int{0, 10}, [2]int{2000, 2010}, [2]int{2100, 2110}, [2]int{2200, 2990}), 3, 3},
	} {
		if got := mostArrivedWithin(tc.spans, time.Second); got != tc.arrived {
			t.Errorf("%s: mostArrivedWithin = %d, want %d", tc.name, got, tc.arrived)
		}
		if got := mostDecidedWithin(tc.spans, time.Second); got != tc.decided {
			t.Errorf("%s: mostDecidedWithin = %d, want %d", tc.name, got, tc.decided)
		}
	}
	sp := spans([2]int{0, 50}, [2]int{100, 150}, [2]int{200, 250})
	for _, tc := range []struct {
		after, e int
		want     int
	}{
		{-1, 300, 3}, {50, 300, 2}, {49, 99, 1}, {49, 100, 2}, {250, 400, 0}, {-100, -1, 0},
	} {
		if got := mayCount(sp, ms(tc.after), ms(tc.e)); got != tc.want {
			t.Errorf("mayCount(after %d, by %d) = %d, want %d", tc.after, tc.e, got, tc.want)
		}
	}
}
