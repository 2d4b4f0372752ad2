package jsonbatch

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestCheckDimension(t *testing.T) {
	for _, tc := range []struct {
		batch, other string
		err          string // a part of the error, "" for none
	}{
		{"notifications.*.tokens.*", "notifications.*.message", ""},
		{"notifications.*.tokens.*", "notifications.*.tokens.*", ""},
		{"notifications.*.tokens.*", "notifications.*.data.title", ""},
		{"notifications.*.tokens.*", "topic", ""},
		{"notifications.*.tokens.*", "notifications.0.message", ""},
		{"*.to", "*.title", ""},
		{"*.to", "*", ""},
		{"personalizations.*.to.*.email", "personalizations.*.subject", ""},
		{"personalizations.*.to.*.email", "personalizations.*.to.*.name", ""},
		{"registration_ids", "data.title", ""},
		{"*.to", "*.to.*", "has 2 wildcards, more than the 1 of the batch dimension"},
		{"registration_ids", "ids.*", "has 1 wildcards, more than the 0"},
		{"notifications.*.tokens.*", "messages.*.text", "does not follow the batch dimension"},
		{"personalizations.*.to.*.email", "personalizations.*.cc.*.email", "does not follow"},
		{"a.*.b.*", "a.*.c", ""},
		{"a.*.b.*", "*.b", "does not follow"},
		// other's wildcard lies past the end of the batch path (found by
		// FuzzEnumerate: it sliced past p's segments).
		{"*", "x.*", "does not follow"},
		{"*", "a.b.*", "does not follow"},
	} {
		err := mustPath(t, tc.batch).CheckDimension(mustPath(t, tc.other))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s for %s: %v", tc.other, tc.batch, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s for %s: error %v, want one saying %q", tc.other, tc.batch, err, tc.err)
		case err != nil && !strings.Contains(err.Error(), tc.other):
			t.Errorf("%s for %s: error %q does not name the dimension", tc.other, tc.batch, err)
		}
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name, batch, doc, other string
		want                    []string // entry path = kind:text
	}{{
		name:  "gorush message per notification",
		batch: "notifications.*.tokens.*",
		doc:   `{"notifications":[{"tokens":["t1","t2"],"message":"hi"},{"tokens":[]},{"message":"none"},{"tokens":["t3"],"message":"yo"}]}`,
		other: "notifications.*.message",
		want: []string{
			"notifications.0.tokens.0 = string:hi",
			"notifications.0.tokens.1 = string:hi",
			"notifications.3.tokens.0 = string:yo",
		},
	}, {
		name:  "expo title per message, both forms, one missing",
		batch: "*.to",
		doc:   `[{"to":"a","title":"A"},{"to":["b","c"]},{"to":"d","title":null},{"title":"E","to":["e"]}]`,
		other: "*.title",
		want: []string{
			"0.to = string:A",
			"1.to.0 = missing:",
			"1.to.1 = missing:",
			"2.to = missing:",
			"3.to.0 = string:E",
		},
	}, {
		name:  "expo: the message itself, as compact JSON",
		batch: "*.to",
		doc:   `[{"to":"a","title":"A"},{"to":["b","c"],"body":"B"}]`,
		other: "*",
		want: []string{
			`0.to = object:{"title":"A","to":"a"}`,
			`1.to.0 = object:{"body":"B","to":["b","c"]}`,
			`1.to.1 = object:{"body":"B","to":["b","c"]}`,
		},
	}, {
		name:  "onesignal contents, the same for every entry",
		batch: "include_subscription_ids",
		doc:   `{"include_subscription_ids":["s1","s2"],"contents":{"fr":"Salut","en":"Hello"}}`,
		other: "contents",
		want: []string{
			`include_subscription_ids.0 = object:{"en":"Hello","fr":"Salut"}`,
			`include_subscription_ids.1 = object:{"en":"Hello","fr":"Salut"}`,
		},
	}, {
		name:  "sendgrid subject per personalization",
		batch: "personalizations.*.to.*.email",
		doc:   `{"personalizations":[{"to":[{"email":"a@x"},{"email":"b@x"}],"subject":"one"},{"subject":"two","to":[{"email":"c@x"}]}]}`,
		other: "personalizations.*.subject",
		want: []string{
			"personalizations.0.to.0.email = string:one",
			"personalizations.0.to.1.email = string:one",
			"personalizations.1.to.0.email = string:two",
		},
	}, {
		name:  "sendgrid name per recipient",
		batch: "personalizations.*.to.*.email",
		doc:   `{"personalizations":[{"to":[{"email":"a@x","name":"A"},{"email":"b@x"}]},{"to":[{"name":"C","email":"c@x"}]}]}`,
		other: "personalizations.*.to.*.name",
		want: []string{
			"personalizations.0.to.0.email = string:A",
			"personalizations.0.to.1.email = missing:",
			"personalizations.1.to.0.email = string:C",
		},
	}, {
		name:  "fcm, a constant that is missing",
		batch: "registration_ids",
		doc:   `{"registration_ids":["r1","r2"]}`,
		other: "data.title",
		want: []string{
			"registration_ids.0 = missing:",
			"registration_ids.1 = missing:",
		},
	}, {
		name:  "the batch dimension itself",
		batch: "notifications.*.tokens.*",
		doc:   `{"notifications":[{"tokens":["t1",2]}]}`,
		other: "notifications.*.tokens.*",
		want: []string{
			"notifications.0.tokens.0 = string:t1",
			"notifications.0.tokens.1 = number:2",
		},
	}, {
		name:  "an array is one value, not expanded",
		batch: "*.to",
		doc:   `[{"to":"a","tags":["x", "y"]}]`,
		other: "*.tags",
		want:  []string{`0.to = array:["x","y"]`},
	}, {
		name:  "no entries",
		batch: "*.to",
		doc:   `[{"title":"A"}]`,
		other: "*.title",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustBatch(t, tc.batch, tc.doc)
			vs, err := b.Resolve(mustPath(t, tc.other))
			if err != nil {
				t.Fatal(err)
			}
			if len(vs) != len(b.Entries) {
				t.Fatalf("%d values for %d entries", len(vs), len(b.Entries))
			}
			var got []string
			for i, v := range vs {
				got = append(got, fmt.Sprintf("%s = %s:%s", b.EntryPath(i), v.Kind, v.Text))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tc.want, "\n\t"))
			}
		})
	}
}

func TestResolveRefusesAnIncompatiblePath(t *testing.T) {
	b := mustBatch(t, "*.to", `[{"to":"a"}]`)
	if _, err := b.Resolve(mustPath(t, "*.to.*")); err == nil {
		t.Fatal("resolved *.to.* for *.to")
	}
}
