package jsonbatch

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEnumerate(t *testing.T) {
	for _, tc := range []struct {
		name, path, doc string
		want            []string
	}{{
		name: "expo, to a string",
		path: "*.to",
		doc:  `[{"to":"ExponentPushToken[a]","body":"hi"},{"body":"yo","to":"ExponentPushToken[b]"}]`,
		want: []string{
			`0.to [0] "ExponentPushToken[a]" -> string:ExponentPushToken[a]`,
			`1.to [1] "ExponentPushToken[b]" -> string:ExponentPushToken[b]`,
		},
	}, {
		name: "expo, to an array",
		path: "*.to",
		doc:  `[{"to":["a","b"],"body":"hi"}]`,
		want: []string{
			`0.to.0 [0 0] "a" -> string:a`,
			`0.to.1 [0 1] "b" -> string:b`,
		},
	}, {
		name: "expo, both forms mixed, with whitespace",
		path: "*.to",
		doc:  "[ {\"to\" : \"a\"},\n  {\"to\": [ \"b\" , \"c\" ]},\t{\"to\":\"d\"} ]\n",
		want: []string{
			`0.to [0] "a" -> string:a`,
			`1.to.0 [1 0] "b" -> string:b`,
			`1.to.1 [1 1] "c" -> string:c`,
			`2.to [2] "d" -> string:d`,
		},
	}, {
		name: "expo, missing and null recipients",
		path: "*.to",
		doc:  `[{"to":"a"},{"body":"x"},{"to":null},{"to":["b",null]},null,"m",{"to":[]}]`,
		want: []string{
			`0.to [0] "a" -> string:a`,
			`3.to.0 [3 0] "b" -> string:b`,
			`missing 1.to [1]`,
			`missing 2.to [2]`,
			`missing 3.to.1 [3 1]`,
			`missing 4.to [4]`,
			`missing 5.to [5]`,
		},
	}, {
		name: "expo, a single message object is not a batch",
		path: "*.to",
		doc:  `{"to":"a"}`,
		want: []string{`missing *.to []`},
	}, {
		name: "expo, empty batch",
		path: "*.to",
		doc:  `[]`,
	}, {
		name: "gorush",
		path: "notifications.*.tokens.*",
		doc:  `{"notifications":[{"tokens":["t1","t2"],"platform":2,"message":"hi"},{"message":"yo","tokens":["t3"]}]}`,
		want: []string{
			`notifications.0.tokens.0 [0 0] "t1" -> string:t1`,
			`notifications.0.tokens.1 [0 1] "t2" -> string:t2`,
			`notifications.1.tokens.0 [1 0] "t3" -> string:t3`,
		},
	}, {
		name: "gorush, tokens named without the last wildcard",
		path: "notifications.*.tokens",
		doc:  `{"notifications":[{"tokens":["t1","t2"]},{"tokens":"t3"}]}`,
		want: []string{
			`notifications.0.tokens.0 [0 0] "t1" -> string:t1`,
			`notifications.0.tokens.1 [0 1] "t2" -> string:t2`,
			`notifications.1.tokens [1] "t3" -> string:t3`,
		},
	}, {
		name: "gorush, notifications without tokens",
		path: "notifications.*.tokens.*",
		doc:  `{"notifications":[{"message":"hi"},{"tokens":[]},{"tokens":"t"},{"tokens":["t4"]}]}`,
		want: []string{
			`notifications.3.tokens.0 [3 0] "t4" -> string:t4`,
			`missing notifications.0.tokens.* [0]`,
			`missing notifications.2.tokens.* [2]`,
		},
	}, {
		name: "gorush, no notifications",
		path: "notifications.*.tokens.*",
		doc:  `{"notification":[]}`,
		want: []string{`missing notifications.*.tokens.* []`},
	}, {
		name: "onesignal",
		path: "include_subscription_ids",
		doc:  `{"app_id":"x","include_subscription_ids":["s1","s2"],"contents":{"en":"Hello"}}`,
		want: []string{
			`include_subscription_ids.0 [0] "s1" -> string:s1`,
			`include_subscription_ids.1 [1] "s2" -> string:s2`,
		},
	}, {
		name: "sendgrid",
		path: "personalizations.*.to.*.email",
		doc: `{"personalizations":[{"to":[{"email":"a@x","name":"A"},{"email":"b@x"}]},` +
			`{"to":[{"name":"no address"},{"email":"c@x"}],"subject":"s"}],"from":{"email":"f@x"}}`,
		want: []string{
			`personalizations.0.to.0.email [0 0] "a@x" -> string:a@x`,
			`personalizations.0.to.1.email [0 1] "b@x" -> string:b@x`,
			`personalizations.1.to.1.email [1 1] "c@x" -> string:c@x`,
			`missing personalizations.1.to.0.email [1 0]`,
		},
	}, {
		name: "fcm legacy",
		path: "registration_ids",
		doc:  `{"registration_ids":["r1","r2","r3"],"data":{"k":"v"}}`,
		want: []string{
			`registration_ids.0 [0] "r1" -> string:r1`,
			`registration_ids.1 [1] "r2" -> string:r2`,
			`registration_ids.2 [2] "r3" -> string:r3`,
		},
	}, {
		name: "a path without wildcards on one value",
		path: "registration_ids",
		doc:  `{"registration_ids":"r1"}`,
		want: []string{`registration_ids [] "r1" -> string:r1`},
	}, {
		name: "values rendered as {json.<path>} renders them",
		path: "ids",
		doc:  `{"ids":[12, -1.50e+3, true, false, "a\u0062\"c\\", "\ud83d\ude00"]}`,
		want: []string{
			`ids.0 [0] 12 -> number:12`,
			`ids.1 [1] -1.50e+3 -> number:-1.50e+3`,
			`ids.2 [2] true -> bool:true`,
			`ids.3 [3] false -> bool:false`,
			`ids.4 [4] "a\u0062\"c\\" -> string:ab"c\`,
			`ids.5 [5] "\ud83d\ude00" -> string:😀`,
		},
	}, {
		name: "objects and arrays as values: compact, members sorted, never expanded twice",
		path: "ids",
		doc:  `{"ids":[{"b":1.0,"a":"<"}, [3, [4]], [], {}]}`,
		want: []string{
			`ids.0 [0] {"b":1.0,"a":"<"} -> object:{"a":"\u003c","b":1.0}`,
			`ids.1 [1] [3, [4]] -> array:[3,[4]]`,
			`ids.2 [2] [] -> array:[]`,
			`ids.3 [3] {} -> object:{}`,
		},
	}, {
		name: "an object at the end of the path",
		path: "personalizations.*.to.*",
		doc:  `{"personalizations":[{"to":[{"name":"A","email":"a@x"}]}]}`,
		want: []string{`personalizations.0.to.0 [0 0] {"name":"A","email":"a@x"} -> object:{"email":"a@x","name":"A"}`},
	}, {
		name: "a wildcard on an element that is an array is expanded once more",
		path: "ids.*",
		doc:  `{"ids":["a",["b","c"]]}`,
		want: []string{
			`ids.0 [0] "a" -> string:a`,
			`ids.1.0 [1 0] "b" -> string:b`,
			`ids.1.1 [1 1] "c" -> string:c`,
		},
	}, {
		name: "escaped member names",
		path: "*.token",
		doc:  `[{"t\u006fken":"a"},{"token":"b"}]`,
		want: []string{
			`0.token [0] "a" -> string:a`,
			`1.token [1] "b" -> string:b`,
		},
	}, {
		name: "index segments",
		path: "a.*.0",
		doc:  `{"a":[["x","y"],["z"],[]]}`,
		want: []string{
			`a.0.0 [0] "x" -> string:x`,
			`a.1.0 [1] "z" -> string:z`,
			`missing a.2.0 [2]`,
		},
	}, {
		name: "an index segment names a member of an object",
		path: "*.0",
		doc:  `[{"0":"x"},["y"]]`,
		want: []string{
			`0.0 [0] "x" -> string:x`,
			`1.0 [1] "y" -> string:y`,
		},
	}, {
		name: "a wildcard matches arrays only",
		path: "*.to",
		doc:  `[{"to":"a"}]`,
		want: []string{`0.to [0] "a" -> string:a`},
	}, {
		name: "wildcard on an object member",
		path: "m.*",
		doc:  `{"m":{"*":"a"}}`,
		want: []string{`missing m.* []`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := describe(mustBatch(t, tc.path, tc.doc))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(tc.want, "\n\t"))
			}
		})
	}
}

func TestEnumerateMax(t *testing.T) {
	p := mustPath(t, "*.to")
	doc := []byte(`[{"to":"a"},{"to":["b","c"]},{"x":1}]`) // 3 entries, 1 miss
	for _, tc := range []struct {
		max     int
		tooMany bool
	}{{4, false}, {3, true}, {1, true}, {0, false}} {
		_, err := p.Enumerate(doc, tc.max)
		if got := errors.Is(err, ErrTooMany); got != tc.tooMany {
			t.Errorf("max %d: err = %v, want ErrTooMany %v", tc.max, err, tc.tooMany)
		}
	}
}

// TestEnumerateMessagesObjectForm proves that one Expo message sent as an
// object is read as a batch of that message: its recipients, their paths
// as the sender wrote them, and a removal that gives back an object.
func TestEnumerateMessagesObjectForm(t *testing.T) {
	p, err := ParsePath("*.to")
	if err != nil {
		t.Fatal(err)
	}
	doc := []byte(` {"to": ["a", "b", "c"], "body": "hi"} `)
	b, err := p.EnumerateMessages(doc, 0)
	if err != nil || !b.Single() || len(b.Entries) != 3 {
		t.Fatalf("%+v, %v", b, err)
	}
	if got := b.EntryPath(1); got != "to.1" {
		t.Errorf("path of b: %q, want to.1", got)
	}
	rm, err := b.Remove([]int{1})
	if err != nil || string(rm.Body) != ` {"to": ["a", "c"], "body": "hi"} ` || rm.Dropped[0] != "to.1" {
		t.Errorf("removal: %q %q %v", rm.Body, rm.Dropped, err)
	}
	one, err := p.EnumerateMessages([]byte(`{"body":"no recipient"}`), 0)
	if err != nil || len(one.Missing) != 1 || one.Missing[0].Path != "to" {
		t.Errorf("missing recipient of an object: %+v, %v", one, err)
	}
	arr, err := p.EnumerateMessages([]byte(`[{"to":"a"}]`), 0)
	if err != nil || arr.Single() || arr.EntryPath(0) != "0.to" {
		t.Errorf("the array form is read as before: %+v, %v", arr, err)
	}
}
