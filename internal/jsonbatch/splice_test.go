package jsonbatch

import (
	"encoding/json"
	"testing"
)

// capTicket is the ticket SpliceExpo inserts for rule and n seconds.
func capTicket(rule, n string) string {
	return `{"status":"error","message":"frequency cap ` + rule + `: retry in ` + n + ` s",` +
		`"details":{"error":"MessageRateExceeded","rule":"` + rule + `","retry_after":` + n + `}}`
}

func TestSpliceExpo(t *testing.T) {
	const ok1, ok2, ok3 = `{"status":"ok","id":"A"}`, `{ "status": "ok", "id": "B" }`, `{"status":"error","message":"DeviceNotRegistered","details":{"error":"DeviceNotRegistered"}}`
	burst, daily := capTicket("burst", "59"), capTicket("daily", "3600")
	for _, tc := range []struct {
		name   string
		status int
		answer string
		total  int
		capped []Capped
		want   string // "" for the answer unchanged
		ok     bool
	}{{
		name: "two of five capped", status: 200,
		answer: `{"data":[` + ok1 + `, ` + ok2 + `, ` + ok3 + `]}`,
		total:  5, capped: []Capped{{3, "daily", 3600}, {1, "burst", 59}},
		want: `{"data":[` + ok1 + `,` + burst + `,` + ok2 + `,` + daily + `,` + ok3 + `]}`, ok: true,
	}, {
		name: "first and last", status: 200,
		answer: "{\n  \"data\": [ " + ok1 + " ],\n  \"errors\": []\n}\n",
		total:  3, capped: []Capped{{0, "burst", 59}, {2, "burst", 59}},
		want: "{\n  \"data\": [" + burst + "," + ok1 + "," + burst + "],\n  \"errors\": []\n}\n", ok: true,
	}, {
		name: "members before and after data kept", status: 201,
		answer: `{"x":[1,2],"data":[` + ok1 + `],"y":{"data":[]}}`,
		total:  2, capped: []Capped{{1, "burst", 59}},
		want: `{"x":[1,2],"data":[` + ok1 + `,` + burst + `],"y":{"data":[]}}`, ok: true,
	}, {
		name: "every one capped", status: 200,
		answer: `{"data":[]}`, total: 2, capped: []Capped{{0, "burst", 59}, {1, "daily", 3600}},
		want: `{"data":[` + burst + `,` + daily + `]}`, ok: true,
	}, {
		name: "none capped", status: 200,
		answer: `{"data": [ ` + ok1 + ` ]}`, total: 1,
		want: `{"data": [ ` + ok1 + ` ]}`, ok: true,
	}, {
		name: "a rule name to escape", status: 200,
		answer: `{"data":[]}`, total: 1, capped: []Capped{{0, `a"b\c`, 1}},
		want: `{"data":[{"status":"error","message":"frequency cap a\"b\\c: retry in 1 s","details":{"error":"MessageRateExceeded","rule":"a\"b\\c","retry_after":1}}]}`,
		ok:   true,
	},
		{name: "upstream error status", status: 400, answer: `{"data":[]}`, total: 1, capped: []Capped{{0, "r", 1}}},
		{name: "upstream 5xx", status: 503, answer: `oops`, total: 1, capped: []Capped{{0, "r", 1}}},
		{name: "one ticket too many", status: 200, answer: `{"data":[` + ok1 + `,` + ok2 + `]}`, total: 2, capped: []Capped{{0, "r", 1}}},
		{name: "one ticket too few", status: 200, answer: `{"data":[]}`, total: 2, capped: []Capped{{0, "r", 1}}},
		{name: "request-level errors", status: 200, answer: `{"errors":[{"code":"PUSH_TOO_MANY_EXPERIENCE_IDS"}]}`, total: 2, capped: []Capped{{0, "r", 1}}},
		{name: "data not an array", status: 200, answer: `{"data":{"status":"ok"}}`, total: 2, capped: []Capped{{0, "r", 1}}},
		{name: "an array answer", status: 200, answer: `[{"data":[]}]`, total: 1, capped: []Capped{{0, "r", 1}}},
		{name: "not JSON", status: 200, answer: `{"data":[`, total: 1, capped: []Capped{{0, "r", 1}}},
		{name: "data named twice", status: 200, answer: `{"data":[],"data":[` + ok1 + `]}`, total: 1, capped: []Capped{{0, "r", 1}}},
		{name: "position repeated", status: 200, answer: `{"data":[]}`, total: 2, capped: []Capped{{0, "r", 1}, {0, "r", 1}}},
		{name: "position out of range", status: 200, answer: `{"data":[` + ok1 + `]}`, total: 2, capped: []Capped{{2, "r", 1}}},
		{name: "more capped than sent", status: 200, answer: `{"data":[]}`, total: 0, capped: []Capped{{0, "r", 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := SpliceExpo(tc.status, []byte(tc.answer), tc.total, tc.capped)
			want := tc.want
			if want == "" {
				want = tc.answer
			}
			if ok != tc.ok || string(got) != want {
				t.Errorf("got %v\n%s\nwant %v\n%s", ok, got, tc.ok, want)
			}
			if ok && !json.Valid(got) {
				t.Errorf("%s is not valid JSON", got)
			}
		})
	}
}
