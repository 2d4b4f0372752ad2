package jsonbatch

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestRemove(t *testing.T) {
	const expo3 = `[{"to":"a"}, {"to":"b"}, {"to":"c"}]`
	const pretty = `[
  {
    "to": ["a", "b"],
    "title": "x"
  },
  {
    "to": "c"
  }
]
`
	for _, tc := range []struct {
		name, path, doc string
		drop            []string // entry paths
		want            string
		nothingLeft     bool
	}{
		{name: "nothing", path: "*.to", doc: expo3, want: expo3},
		{name: "expo, first", path: "*.to", doc: expo3, drop: []string{"0.to"}, want: `[{"to":"b"}, {"to":"c"}]`},
		{name: "expo, middle", path: "*.to", doc: expo3, drop: []string{"1.to"}, want: `[{"to":"a"}, {"to":"c"}]`},
		{name: "expo, last", path: "*.to", doc: expo3, drop: []string{"2.to"}, want: `[{"to":"a"}, {"to":"b"}]`},
		{name: "expo, first and last", path: "*.to", doc: expo3, drop: []string{"2.to", "0.to"}, want: `[{"to":"b"}]`},
		{name: "expo, first two", path: "*.to", doc: expo3, drop: []string{"0.to", "1.to"}, want: `[{"to":"c"}]`},
		{name: "expo, last two", path: "*.to", doc: expo3, drop: []string{"1.to", "2.to"}, want: `[{"to":"a"}]`},
		{name: "expo, all", path: "*.to", doc: expo3, drop: []string{"0.to", "1.to", "2.to"}, want: `[]`, nothingLeft: true},
		{name: "expo, all, whitespace inside", path: "*.to", doc: " [ {\"to\":\"a\"} ]\n", drop: []string{"0.to"}, want: " []\n", nothingLeft: true},
		{
			name: "expo, one of a to array",
			path: "*.to", doc: pretty, drop: []string{"0.to.1"},
			want: "[\n  {\n    \"to\": [\"a\"],\n    \"title\": \"x\"\n  },\n  {\n    \"to\": \"c\"\n  }\n]\n",
		},
		{
			name: "expo, a whole to array: the message goes",
			path: "*.to", doc: pretty, drop: []string{"0.to.0", "0.to.1"},
			want: "[\n  {\n    \"to\": \"c\"\n  }\n]\n",
		},
		{
			name: "expo, a string to: the message goes",
			path: "*.to", doc: pretty, drop: []string{"1.to"},
			want: "[\n  {\n    \"to\": [\"a\", \"b\"],\n    \"title\": \"x\"\n  }\n]\n",
		},
		{
			name: "expo, everything in both forms",
			path: "*.to", doc: pretty, drop: []string{"0.to.0", "0.to.1", "1.to"},
			want: "[]\n", nothingLeft: true,
		},
		{
			name: "expo, other bytes as written",
			path: "*.to",
			doc:  `[{"to":"a","n":1.50E+3,"s":"\u00e9\/","z":[ ]} ,{"to":"b"},{"to" :"c","d":{"b":1,"a":2}}]`,
			drop: []string{"1.to"},
			want: `[{"to":"a","n":1.50E+3,"s":"\u00e9\/","z":[ ]},{"to" :"c","d":{"b":1,"a":2}}]`,
		},
		{
			name: "gorush, one token",
			path: "notifications.*.tokens.*",
			doc:  `{"notifications":[{"tokens":["t1","t2","t3"],"message":"hi"},{"tokens":["t4"],"message":"yo"}]}`,
			drop: []string{"notifications.0.tokens.1"},
			want: `{"notifications":[{"tokens":["t1","t3"],"message":"hi"},{"tokens":["t4"],"message":"yo"}]}`,
		},
		{
			name: "gorush, every token of a notification: it goes",
			path: "notifications.*.tokens.*",
			doc:  `{"notifications":[{"tokens":["t1","t2"],"message":"hi"},{"tokens":["t4"],"message":"yo"}]}`,
			drop: []string{"notifications.0.tokens.1", "notifications.0.tokens.0"},
			want: `{"notifications":[{"tokens":["t4"],"message":"yo"}]}`,
		},
		{
			name: "gorush, everything",
			path: "notifications.*.tokens.*",
			doc:  `{"notifications":[{"tokens":["t1"]},{"tokens":["t4"]}],"other":1}`,
			drop: []string{"notifications.0.tokens.0", "notifications.1.tokens.0"},
			want: `{"notifications":[],"other":1}`, nothingLeft: true,
		},
		{
			name: "gorush, a null token keeps its array",
			path: "notifications.*.tokens.*",
			doc:  `{"notifications":[{"tokens":[null,"t1"]}]}`,
			drop: []string{"notifications.0.tokens.1"},
			want: `{"notifications":[{"tokens":[null]}]}`, nothingLeft: true,
		},
		{
			name: "gorush, an array that was empty stays",
			path: "notifications.*.tokens.*",
			doc:  `{"notifications":[{"tokens":[]},{"tokens":["t1"]},{"tokens":["t2"]}]}`,
			drop: []string{"notifications.1.tokens.0"},
			want: `{"notifications":[{"tokens":[]},{"tokens":["t2"]}]}`,
		},
		{
			name: "sendgrid, one recipient object",
			path: "personalizations.*.to.*.email",
			doc:  `{"personalizations":[{"to":[{"email":"a@x"},{"email":"b@x","name":"B"}],"subject":"s"}],"from":{"email":"f@x"}}`,
			drop: []string{"personalizations.0.to.1.email"},
			want: `{"personalizations":[{"to":[{"email":"a@x"}],"subject":"s"}],"from":{"email":"f@x"}}`,
		},
		{
			name: "sendgrid, a whole personalization",
			path: "personalizations.*.to.*.email",
			doc:  `{"personalizations":[{"to":[{"email":"a@x"},{"email":"b@x"}]},{"to":[{"email":"c@x"}]}]}`,
			drop: []string{"personalizations.0.to.0.email", "personalizations.0.to.1.email"},
			want: `{"personalizations":[{"to":[{"email":"c@x"}]}]}`,
		},
		{
			name: "onesignal",
			path: "include_subscription_ids",
			doc:  `{"include_subscription_ids": ["s1", "s2", "s3"], "contents": {"en": "Hi"}}`,
			drop: []string{"include_subscription_ids.0", "include_subscription_ids.2"},
			want: `{"include_subscription_ids": ["s2"], "contents": {"en": "Hi"}}`,
		},
		{
			name: "onesignal, all: the array empties, nothing above it to remove",
			path: "include_subscription_ids",
			doc:  `{"include_subscription_ids": [ "s1", "s2" ], "contents": {"en": "Hi"}}`,
			drop: []string{"include_subscription_ids.0", "include_subscription_ids.1"},
			want: `{"include_subscription_ids": [], "contents": {"en": "Hi"}}`, nothingLeft: true,
		},
		{
			name: "fcm, a single value has no element to remove",
			path: "registration_ids",
			doc:  `{"registration_ids":"r1"}`,
			drop: []string{"registration_ids"},
			want: `{"registration_ids":"r1"}`, nothingLeft: true,
		},
		{
			name: "nested arrays after a wildcard",
			path: "ids.*",
			doc:  `{"ids":["a",["b","c"],"d"]}`,
			drop: []string{"ids.1.0", "ids.1.1"},
			want: `{"ids":["a","d"]}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustBatch(t, tc.path, tc.doc)
			var drop []int
			for _, p := range tc.drop {
				drop = append(drop, entryIndex(t, b, p))
			}
			r, err := b.Remove(drop)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Body) != tc.want {
				t.Errorf("body\n%s\nwant\n%s", r.Body, tc.want)
			}
			if !json.Valid(r.Body) {
				t.Errorf("body %s is not valid JSON", r.Body)
			}
			want := slices.Clone(tc.drop)
			slices.SortFunc(want, func(x, y string) int { return entryIndex(t, b, x) - entryIndex(t, b, y) })
			if !slices.Equal(r.Dropped, want) {
				t.Errorf("dropped %q, want %q (body order)", r.Dropped, want)
			}
			if r.NothingLeft != tc.nothingLeft {
				t.Errorf("nothing left: %v, want %v", r.NothingLeft, tc.nothingLeft)
			}
		})
	}
}

func TestRemoveRepeatsAndErrors(t *testing.T) {
	b := mustBatch(t, "*.to", `[{"to":"a"},{"to":"b"}]`)
	r, err := b.Remove([]int{1, 1, 1})
	if err != nil || string(r.Body) != `[{"to":"a"}]` || len(r.Dropped) != 1 || r.NothingLeft {
		t.Errorf("dropping 1 thrice: %+v, %v", r, err)
	}
	for _, bad := range [][]int{{2}, {-1}} {
		if _, err := b.Remove(bad); err == nil || !strings.Contains(err.Error(), "no such entry") {
			t.Errorf("dropping %v: %v", bad, err)
		}
	}
	// A batch whose document was swapped under it.
	b.Doc = []byte(`{"x":1}`)
	if _, err := b.Remove([]int{0}); err == nil {
		t.Error("removed an entry from another document")
	}
}
