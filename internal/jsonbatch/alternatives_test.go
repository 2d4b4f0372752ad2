package jsonbatch

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

// altPath builds the alternatives of paths (each "fcm_topics:" prefixed
// one read by FCMTopics).
func altPath(t testing.TB, paths ...string) *Path {
	t.Helper()
	var ps []*Path
	for _, s := range paths {
		if rest, ok := strings.CutPrefix(s, "fcm_topics:"); ok {
			ps = append(ps, mustPath(t, rest).WithReader(FCMTopics))
			continue
		}
		if rest, ok := strings.CutPrefix(s, "fcm_topic:"); ok {
			ps = append(ps, mustPath(t, rest).WithReader(FCMTopic))
			continue
		}
		ps = append(ps, mustPath(t, s))
	}
	p, err := Alternatives(ps...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// gorushAlts are gorush's address fields as the example reads them.
var gorushAlts = []string{
	"notifications.*.tokens.*",
	"notifications.*.to",
	"fcm_topic:notifications.*[platform!=1].topic",
	"fcm_topics:notifications.*[platform!=1].condition",
}

func TestAlternativesEnumerate(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		paths     []string
		want      []string
	}{
		{
			name:  "tokens and to, in body order",
			paths: gorushAlts,
			doc:   `{"notifications":[{"to":"z","tokens":["a","b"],"platform":2},{"tokens":["c"],"platform":1}]}`,
			want: []string{
				`notifications.0.to [0] "z" -> string:z`,
				`notifications.0.tokens.0 [0 0] "a" -> string:a`,
				`notifications.0.tokens.1 [0 1] "b" -> string:b`,
				`notifications.1.tokens.0 [1 0] "c" -> string:c`,
			},
		},
		{
			name:  "to alone, tokens null or empty, Go's zero values",
			paths: gorushAlts,
			doc:   `{"notifications":[{"tokens":null,"to":"z","platform":2,"topic":"","condition":""},{"tokens":[],"to":"y","platform":2}]}`,
			want: []string{
				`notifications.0.to [0] "z" -> string:z`,
				`notifications.1.to [1] "y" -> string:y`,
			},
		},
		{
			name:  "an Android topic and condition are entries, an iOS topic is not",
			paths: gorushAlts,
			doc: `{"notifications":[{"tokens":["a"],"platform":2,"topic":"news","condition":"'x' in topics || ('y' in topics && !('x' in topics))"},` +
				`{"tokens":["b"],"platform":1,"topic":"com.example.app"},{"platform":3,"topic":"deals"}]}`,
			want: []string{
				`notifications.0.tokens.0 [0 0] "a" -> string:a`,
				`notifications.0.topic [0] "news" -> string:news`,
				`notifications.0.condition [0] "'x' in topics || ('y' in topics && !('x' in topics))" -> string:x`,
				`notifications.0.condition [0] "'x' in topics || ('y' in topics && !('x' in topics))" -> string:y`,
				`notifications.1.tokens.0 [1 0] "b" -> string:b`,
				`notifications.2.topic [2] "deals" -> string:deals`,
			},
		},
		{
			name:  "a notification that names nobody is one miss",
			paths: gorushAlts,
			doc:   `{"notifications":[{"tokens":["a"],"platform":2},{"platform":1,"topic":"com.example.app","to":""}]}`,
			want: []string{
				`notifications.0.tokens.0 [0 0] "a" -> string:a`,
				`missing notifications.1.tokens.* [1]`,
			},
		},
		{
			name:  "an empty token is missing, beside a to",
			paths: gorushAlts,
			doc:   `{"notifications":[{"tokens":["",null],"to":"z","platform":2}]}`,
			want: []string{
				`notifications.0.to [0] "z" -> string:z`,
				`missing notifications.0.tokens.0 [0 0]`,
				`missing notifications.0.tokens.1 [0 1]`,
			},
		},
		{
			name:  "FCM v1: token, topic or condition, no wildcard",
			paths: []string{"message.token", "message.topic", "fcm_topics:message.condition"},
			doc:   `{"message":{"condition":"\"b\" in topics&&'a' in topics","notification":{"body":"x"}}}`,
			want: []string{
				`message.condition [] "\"b\" in topics&&'a' in topics" -> string:b`,
				`message.condition [] "\"b\" in topics&&'a' in topics" -> string:a`,
			},
		},
		{
			name:  "FCM v1: none of them",
			paths: []string{"message.token", "message.topic", "fcm_topics:message.condition"},
			doc:   `{"message":{"token":"","notification":{"body":"x"}}}`,
			want:  []string{`missing message.token []`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Valid([]byte(tc.doc)); err != nil {
				t.Fatal(err)
			}
			b, err := altPath(t, tc.paths...).Enumerate([]byte(tc.doc), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := describe(b); !slices.Equal(got, tc.want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestAlternativesErrors(t *testing.T) {
	p := altPath(t, gorushAlts...)
	for _, tc := range []struct{ doc, want string }{
		{`{"notifications":[{"platform":2,"condition":"'a' in topic"}]}`, `notifications.0.condition: topic condition "'a' in topic": expected in topics`},
		{`{"notifications":[{"platform":2,"condition":7}]}`, `notifications.0.condition is a number where fcm_topics reads a string`},
	} {
		_, err := p.Enumerate([]byte(tc.doc), 0)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.doc, err, tc.want)
		}
	}
	// A null token is told by its own path, not by the alternatives
	// the notification leaves out.
	if b, err := p.Enumerate([]byte(`{"notifications":[{"platform":2,"tokens":[null]}]}`), 0); err != nil || len(b.Missing) != 1 || b.Missing[0].Path != "notifications.0.tokens.0" {
		t.Errorf("a null token: %+v, %v; want one miss at notifications.0.tokens.0", b, err)
	}
	// The topics of a condition count toward the maximum.
	cond := strings.Repeat("'a' in topics || ", 0)
	for i := range 5 {
		cond += "'t" + string(rune('0'+i)) + "' in topics || "
	}
	cond += "'z' in topics"
	doc, _ := json.Marshal(map[string]any{"message": map[string]any{"condition": cond}})
	fcm := altPath(t, "message.token", "fcm_topics:message.condition")
	if _, err := fcm.Enumerate(doc, 3); !errors.Is(err, ErrTooMany) {
		t.Errorf("6 topics under a maximum of 3: got %v, want ErrTooMany", err)
	}
	// The alternatives a message leaves out count toward nothing: 400
	// one-token gorush notifications are 400 entries, not 400 and 1,200
	// absent to, topic and condition fields (it was a 413 under a
	// maximum of 1,000 from 251 on).
	var notes []map[string]any
	for i := range 400 {
		notes = append(notes, map[string]any{"platform": 2, "tokens": []string{"t" + strings.Repeat("x", i%3) + string(rune('a'+i%26))}})
	}
	doc, _ = json.Marshal(map[string]any{"notifications": notes})
	if b, err := p.Enumerate(doc, 400); err != nil || len(b.Entries) != 400 || len(b.Missing) != 0 {
		t.Errorf("400 notifications of one token each under a maximum of 400: %v", err)
	}
	if _, err := p.Enumerate(doc, 399); !errors.Is(err, ErrTooMany) {
		t.Errorf("400 notifications of one token each under a maximum of 399: got %v, want ErrTooMany", err)
	}
	// A miss that stays (a notification naming nobody) counts.
	notes = append(notes[:399:399], map[string]any{"platform": 2, "message": "to nobody"})
	doc, _ = json.Marshal(map[string]any{"notifications": notes})
	if b, err := p.Enumerate(doc, 400); err != nil || len(b.Entries) != 399 || len(b.Missing) != 1 {
		t.Errorf("399 tokens and a notification naming nobody under a maximum of 400: %v", err)
	}
	if _, err := p.Enumerate(doc, 399); !errors.Is(err, ErrTooMany) {
		t.Errorf("399 tokens and a miss under a maximum of 399: got %v, want ErrTooMany", err)
	}
	for _, bad := range [][]string{{"a.*", "a.*"}} {
		if _, err := Alternatives(mustPath(t, bad[0]), mustPath(t, bad[1])); err == nil {
			t.Errorf("Alternatives(%q): no error", bad)
		}
	}
	if _, err := ParsePath("notifications.*[platform].topic"); err == nil {
		t.Error("a filter without = parsed")
	}
	if err := p.CheckDimension(mustPath(t, "notifications.*.message")); err != nil {
		t.Errorf("the message of each notification: %v", err)
	}
	if err := p.CheckDimension(mustPath(t, "notifications.*.tokens.*")); err == nil {
		t.Error("a per-entry dimension deeper than the to alternative passed")
	}
}

func TestAlternativesRemove(t *testing.T) {
	const doc = `{"notifications": [
 {"tokens": ["a", "b"], "to": "z", "platform": 2, "message": "m"},
 {"tokens": [], "to": "y", "platform": 2},
 {"to": "x", "platform": 2, "topic": "news", "condition": "'p' in topics || 'q' in topics"}
]}`
	p := altPath(t, gorushAlts...)
	for _, tc := range []struct {
		name        string
		drop        []string
		want        string
		nothingLeft bool
	}{
		{
			name: "a to beside tokens: the member goes",
			drop: []string{"notifications.0.to"},
			want: `{"notifications": [
 {"tokens": ["a", "b"], "platform": 2, "message": "m"},
 {"tokens": [], "to": "y", "platform": 2},
 {"to": "x", "platform": 2, "topic": "news", "condition": "'p' in topics || 'q' in topics"}
]}`,
		},
		{
			name: "every token, the to kept: tokens left empty",
			drop: []string{"notifications.0.tokens.0", "notifications.0.tokens.1"},
			want: `{"notifications": [
 {"tokens": [], "to": "z", "platform": 2, "message": "m"},
 {"tokens": [], "to": "y", "platform": 2},
 {"to": "x", "platform": 2, "topic": "news", "condition": "'p' in topics || 'q' in topics"}
]}`,
		},
		{
			name: "tokens and to: the notification goes",
			drop: []string{"notifications.0.tokens.0", "notifications.0.tokens.1", "notifications.0.to"},
			want: `{"notifications": [
 {"tokens": [], "to": "y", "platform": 2},
 {"to": "x", "platform": 2, "topic": "news", "condition": "'p' in topics || 'q' in topics"}
]}`,
		},
		{
			name: "the only to of empty tokens: the notification goes",
			drop: []string{"notifications.1.to"},
			want: `{"notifications": [
 {"tokens": ["a", "b"], "to": "z", "platform": 2, "message": "m"},
 {"to": "x", "platform": 2, "topic": "news", "condition": "'p' in topics || 'q' in topics"}
]}`,
		},
		{
			name: "one topic of a condition: the condition goes, the rest stays",
			drop: []string{"notifications.2.condition", "notifications.2.to"},
			want: `{"notifications": [
 {"tokens": ["a", "b"], "to": "z", "platform": 2, "message": "m"},
 {"tokens": [], "to": "y", "platform": 2},
 {"platform": 2, "topic": "news"}
]}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := p.Enumerate([]byte(doc), 0)
			if err != nil {
				t.Fatal(err)
			}
			var ds []int
			for _, path := range tc.drop {
				ds = append(ds, entryIndex(t, b, path))
			}
			r, err := b.Remove(ds)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Body) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", r.Body, tc.want)
			}
			if !json.Valid(r.Body) {
				t.Errorf("not valid JSON: %s", r.Body)
			}
			if r.NothingLeft != tc.nothingLeft {
				t.Errorf("NothingLeft %v", r.NothingLeft)
			}
		})
	}
	// Everything: nothing left.
	b, err := p.Enumerate([]byte(doc), 0)
	if err != nil {
		t.Fatal(err)
	}
	all := make([]int, len(b.Entries))
	for i := range all {
		all[i] = i
	}
	r, err := b.Remove(all)
	if err != nil || !r.NothingLeft || string(r.Body) != `{"notifications": []}` {
		t.Errorf("dropping all: %s, %v, %v", r.Body, r.NothingLeft, err)
	}
}

func TestFCMConditionTopics(t *testing.T) {
	for _, tc := range []struct {
		cond string
		want []string
		err  string
	}{
		{cond: "'a' in topics", want: []string{"a"}},
		{cond: `"a" in topics`, want: []string{"a"}},
		{cond: "'a' in topics && ('b' in topics || 'c' in topics)", want: []string{"a", "b", "c"}},
		{cond: "  ( ( 'c' in topics||'b' in topics ) &&'a'  in\ttopics )  ", want: []string{"c", "b", "a"}},
		// A topic every mention of which is a negated conjunct of the
		// whole is no audience; a double negation is none. A condition
		// that holds for a device in none of its topics reaches the
		// subscribers of every other topic: it counts as "*" too (a new
		// made-up topic a message was an uncapped broadcast).
		{cond: "!('a' in topics) && !!'b-_.~%9' in topics", want: []string{"b-_.~%9"}},
		{cond: "'a' in topics && !('b' in topics)", want: []string{"a"}},
		{cond: "!(!('a' in topics) && 'b' in topics) && 'c' in topics", want: []string{"a", "b", "c"}},
		{cond: "'b' in topics || !('a' in topics) || 'a' in topics", want: []string{"b", "a", "*"}},
		{cond: "!('a' in topics || 'b' in topics)", want: []string{"a", "b", "*"}},
		{cond: "!('a' in topics)", want: []string{"*"}},
		{cond: "!('a' in topics) && !('b' in topics)", want: []string{"*"}},
		{cond: "!!('a' in topics)", want: []string{"a"}},
		// A negation that is no conjunct of the whole, or of more than
		// one topic, may reach a topic's subscribers: it counts.
		{cond: "'zzz' in topics || !('a' in topics && 'zzz' in topics)", want: []string{"zzz", "a", "*"}},
		{cond: "'c' in topics || !('a' in topics && 'b' in topics)", want: []string{"c", "a", "b", "*"}},
		{cond: "('a' in topics && !('b' in topics)) || 'c' in topics", want: []string{"a", "b", "c"}},
		{cond: "'a' in topics && ('c' in topics && !(('b' in topics)))", want: []string{"a", "c"}},
		{cond: "'a' in topics && !('b' in topics) && 'b' in topics", want: []string{"a", "b"}},
		{cond: "'a' in topics || 'a' in topics", want: []string{"a"}},
		{cond: "'新闻' in topics && 'x新' in topics", want: []string{"新闻", "x新"}},
		{cond: "'a' in topics新", err: "in topics"},
		{cond: "'ñ' in topics", err: "topic name"},
		{cond: "", err: "empty topic condition"},
		{cond: "   ", err: "expected a topic"},
		{cond: "'a' in topics &&", err: "at its end"},
		{cond: "'a' in topics & 'b' in topics", err: "expected &&, || or the end at offset 14"},
		{cond: "'a b' in topics", err: "topic name"},
		{cond: "'a\" in topics", err: "closing quote"},
		{cond: "'a' intopics", err: "in topics"},
		{cond: "'a' in topicsx", err: "in topics"},
		{cond: "'a' in topics)", err: "expected &&, || or the end"},
		{cond: "('a' in topics", err: "expected )"},
		{cond: "a in topics", err: "expected a topic"},
		{cond: strings.Repeat("(", 40) + "'a' in topics" + strings.Repeat(")", 40), err: "deeper than"},
		{cond: strings.Repeat("!", 40) + "'a' in topics", err: "deeper than"},
	} {
		got, err := FCMConditionTopics(tc.cond)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: got %v, %v; want error %q", tc.cond, got, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("%q: got %q, %v; want %q", tc.cond, got, err, tc.want)
		}
	}
}

func TestFCMTopicName(t *testing.T) {
	for in, want := range map[string]string{"news": "news", "/topics/news": "news", "新闻": "新闻", "a/b": "", "/topics/": "", "two words": "", "": ""} {
		got, err := FCMTopicName(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("%q: got %q, %v; want %q", in, got, err, want)
		}
	}
}

// FuzzFCMCondition holds FCMConditionTopics to never panicking, and to
// naming only well-formed topics that the condition spells, and
// OpenAudience at most once, last.
func FuzzFCMCondition(f *testing.F) {
	for _, s := range []string{"'a' in topics", "'a' in topics && ('b' in topics || !('c' in topics))", `"x" in topics||"y" in topics`, "((", "'a' in", "!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cond string) {
		topics, err := FCMConditionTopics(cond)
		if err != nil {
			return
		}
		if len(topics) == 0 {
			t.Fatalf("%q: no error and no topic", cond)
		}
		for i, tp := range topics {
			if tp == OpenAudience && i == len(topics)-1 {
				continue
			}
			if tp == "" || !strings.Contains(cond, tp) {
				t.Fatalf("%q: topic %q", cond, tp)
			}
			for i := 0; i < len(tp); {
				n := topicRune(tp[i:])
				if n == 0 {
					t.Fatalf("%q: topic %q", cond, tp)
				}
				i += n
			}
		}
	})
}

// hasFilter reports whether a path has a filtered wildcard ("*[...]"),
// which the fuzz targets' reference walks read as a member name.
func hasFilter(path string) bool { return strings.Contains(path, "*[") }

// FuzzRemoveAlternatives drops a random set of the entries gorush's
// alternatives name and checks the result: valid JSON, whose entries are
// the ones kept (a condition's topics going together), text for text.
func FuzzRemoveAlternatives(f *testing.F) {
	for _, s := range []string{
		`{"notifications":[{"tokens":["a","b"],"to":"z","platform":2,"topic":"t","condition":"'x' in topics || 'y' in topics"},{"to":"y","tokens":[]}]}`,
		`{"notifications":[{"tokens":null,"to":"z","platform":1,"topic":"app"},{"tokens":["c"],"platform":3}]}`,
		` { "notifications" : [ { "to" : "z" } , { "tokens" : [ "a" , "b" ] , "to" : "" } ] } `,
	} {
		f.Add([]byte(s), uint64(7))
	}
	p := altPath(f, gorushAlts...)
	f.Fuzz(func(t *testing.T, doc []byte, seed uint64) {
		b, err := p.Enumerate(doc, 1<<16)
		if err != nil || Valid(doc) != nil {
			return
		}
		var drop []int
		gone := map[int]bool{}
		for i, e := range b.Entries {
			if (seed>>(i%64))&1 == 1 {
				drop = append(drop, i)
				gone[e.Start] = true
			}
		}
		r, err := b.Remove(drop)
		if err != nil {
			t.Fatalf("%s dropping %v: %v", doc, drop, err)
		}
		if !json.Valid(r.Body) {
			t.Fatalf("%s dropping %v: %s is not JSON", doc, drop, r.Body)
		}
		var want []string
		for _, e := range b.Entries {
			if !gone[e.Start] {
				want = append(want, e.Text)
			}
		}
		if len(want) == 0 {
			if !r.NothingLeft && len(drop) > 0 {
				t.Fatalf("%s dropping %v: something left", doc, drop)
			}
			return
		}
		again, err := p.Enumerate(r.Body, 1<<16)
		if err != nil {
			t.Fatalf("%s: %v", r.Body, err)
		}
		var got []string
		for _, e := range again.Entries {
			got = append(got, e.Text)
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s dropping %v: %s names %q, want %q", doc, drop, r.Body, got, want)
		}
	})
}

// TestAlternativesResolve: another dimension is read per entry, whichever
// alternative named it; a message sent as an object is read as an array
// of it, and loses a member as it does in an array.
func TestAlternativesResolve(t *testing.T) {
	p := altPath(t, gorushAlts...)
	doc := `{"notifications":[{"tokens":["a"],"to":"z","message":"m0"},{"platform":2,"topic":"t","message":"m1"},{"to":"y"}]}`
	b, err := p.Enumerate([]byte(doc), 0)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := b.Resolve(mustPath(t, "notifications.*.message"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, v := range vs {
		got = append(got, b.Entries[i].Text+"="+v.Text)
	}
	if want := []string{"a=m0", "z=m0", "t=m1", "y="}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}

	expo := altPath(t, "*.to", "*.cc.*")
	b, err = expo.EnumerateMessages([]byte(`{"to":"a","cc":["b","c"],"body":"x"}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := describe(b); !slices.Equal(got, []string{`to [0] "a" -> string:a`, `cc.0 [0 0] "b" -> string:b`, `cc.1 [0 1] "c" -> string:c`}) {
		t.Errorf("got %q", got)
	}
	r, err := b.Remove([]int{entryIndex(t, b, "to"), entryIndex(t, b, "cc.1")})
	if err != nil || string(r.Body) != `{"cc":["b"],"body":"x"}` {
		t.Errorf("got %s, %v", r.Body, err)
	}
}

// TestAlongWith proves that a condition's other topics are named as going
// with a dropped one (Remove takes the condition away whole), and that
// nothing else is.
func TestAlongWith(t *testing.T) {
	const doc = `{"notifications":[{"tokens":["a"],"platform":2,"condition":"'p' in topics || 'q' in topics || 'r' in topics"},{"to":"x","platform":2}]}`
	b, err := altPath(t, gorushAlts...).Enumerate([]byte(doc), 0)
	if err != nil {
		t.Fatal(err)
	}
	var a, p, q, r, x int
	for i, e := range b.Entries {
		switch e.Text {
		case "a":
			a = i
		case "p":
			p = i
		case "q":
			q = i
		case "r":
			r = i
		case "x":
			x = i
		}
	}
	if got, want := b.AlongWith([]int{q}), []Along{{p, q}, {r, q}}; !slices.Equal(got, want) {
		t.Errorf("q dropped: along %v, want %v", got, want)
	}
	if got, want := b.AlongWith([]int{p, r, x}), []Along{{q, p}}; !slices.Equal(got, want) {
		t.Errorf("p, r and x dropped: along %v, want %v", got, want)
	}
	if got := b.AlongWith([]int{a, x}); got != nil {
		t.Errorf("a token and a to dropped: along %v, want none", got)
	}
	if got := b.AlongWith([]int{p, q, r}); got != nil {
		t.Errorf("the whole condition dropped: along %v, want none", got)
	}
	plain, err := mustPath(t, "*.to").Enumerate([]byte(`[{"to":"a"},{"to":"a"}]`), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := plain.AlongWith([]int{0}); got != nil {
		t.Errorf("a path without alternatives: along %v", got)
	}
}
