package jsonbatch

import "testing"

// A member name that encoding/json would read as one the path reads
// (ASCII case, and Unicode simple folding: ſ is s, the Kelvin sign is k),
// beside that member or instead of it, along the path or any element a
// wildcard reaches, is found; names elsewhere in the document, and exact
// matches, are not.
func TestFoldedName(t *testing.T) {
	for _, tc := range []struct {
		path, doc, name string
	}{
		{"notifications.*.tokens", `{"notifications":[{"tokens":["decoy"],"platform":2,"message":"hi","Tokens":["victim"]}]}`, "Tokens"},
		{"notifications.*.tokens", `{"notifications":[{"tokens":["a"]},{"TOKENS":["victim"]}]}`, "TOKENS"},
		{"notifications.*.tokens", `{"Notifications":[{"tokens":["a"]}]}`, "Notifications"},
		{"to", `{"To":"victim","to":"decoy"}`, "To"},
		{"to", `{"to":"decoy","tO":"victim"}`, "tO"},
		{"message.token", `{"message":{"token":"a","\u0054oken":"victim"}}`, "Token"},
		{"message.task", `{"message":{"task":"a","taſk":"b"}}`, "taſk"},
		{"kind", `{"kind":"a","\u212aind":"b"}`, "\u212aind"},
		{"priority", `{"Priority":"high"}`, "Priority"},
		{"a.0.b", `[{"b":1}]`, ""},
		{"a.0.b", `{"a":[{"b":1},{"B":2}]}`, ""},
		{"a.1.b", `{"a":[{"b":1},{"B":2}]}`, "B"},
		{"to", `{"to":"a","data":{"To":"b"}}`, ""},
		{"to", `{"to":"a","toy":"b","t":"c"}`, ""},
		{"to", `"to"`, ""},
		{"a.b", `{"a":"x","A":{"b":1}}`, "A"},
	} {
		p, err := ParsePath(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if err := Valid([]byte(tc.doc)); err != nil {
			t.Fatalf("%s: %v", tc.doc, err)
		}
		name, _, ok := NewFolds([]*Path{p}).FoldedName([]byte(tc.doc))
		if ok != (tc.name != "") || name != tc.name {
			t.Errorf("%s in %s: %q %v; want %q", tc.path, tc.doc, name, ok, tc.name)
		}
	}
}

// Paths walked together find what each finds alone, in one pass: two
// paths under one wildcard, and paths that part at the root.
func TestFoldsTogether(t *testing.T) {
	var paths []*Path
	for _, s := range []string{"*.to", "*.body", "meta.kind"} {
		p, err := ParsePath(s)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	f := NewFolds(paths)
	for doc, want := range map[string]string{
		`[{"to":"a","body":"x"},{"to":"b","Body":"y"}]`: "Body",
		`[{"to":"a","body":"x"},{"TO":"b","body":"y"}]`: "TO",
		`[{"to":"a","body":"x"}]`:                       "",
		`{"meta":{"Kind":1}}`:                           "Kind",
		`{"meta":{"kind":1},"Meta":{}}`:                 "Meta",
	} {
		name, _, ok := f.FoldedName([]byte(doc))
		if ok != (want != "") || name != want {
			t.Errorf("%s: %q %v; want %q", doc, name, ok, want)
		}
	}
}
