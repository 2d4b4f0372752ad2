package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestBatchConfigErrors proves that each batch config error names its
// line in a Caddyfile: a wildcard dimension that does not follow the
// batch dimension, a wildcard mixed with other text, splice without batch
// drop, max_batch 0 or over 65535, an unknown batch mode, batch settings
// without a batch dimension; and that the JSON form refuses the same at
// load, naming the dimension or field.
func TestBatchConfigErrors(t *testing.T) {
	caddyfile := func(lines ...string) string {
		return ":8080 {\n\tfrequency_cap {\n\t\t" + strings.Join(lines, "\n\t\t") +
			"\n\t\trule r {\n\t\t\tby recipient title\n\t\t\tlimit 2\n\t\t\twindow 1m\n\t\t}\n\t}\n\trespond ok\n}\n"
	}
	for _, c := range []struct {
		lines []string
		want  string
	}{
		{[]string{"dimension recipient {json.notifications.*.tokens.*}", "dimension title {json.other.*.title}"},
			`dimension title: "other.*.title" does not follow the batch dimension "notifications.*.tokens.*"`},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.to.*.x.*}"},
			`dimension title: "*.to.*.x.*" has 3 wildcards, more than the 1 of the batch dimension`},
		// A wildcard past the end of the batch path was a panic at load.
		{[]string{"dimension recipient {json.*}", "dimension title {json.a.b.*}"},
			`dimension title: "a.b.*" does not follow the batch dimension "*"`},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.title}{fcm_topic.*.topic}"},
			"placeholder must be the whole expression"},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.title}{json.other.*.body}"},
			`dimension title: "other.*.body" does not follow the batch dimension "*.to"`},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.title}", "splice expo"}, "splice expo needs batch drop"},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.title}", "batch reject", "splice expo"}, "splice expo needs batch drop"},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.title}", "max_batch 0"}, `max_batch "0" is not an integer of at least 1`},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.title}", "max_batch 70000"}, "max_batch 70000 is more than 65535"},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.title}", "batch some"}, `batch must be reject or drop, not "some"`},
		{[]string{"dimension recipient {json.*.to}", "dimension title {json.*.title}", "splice fcm"}, `splice must be expo, not "fcm"`},
		{[]string{"dimension recipient {json.to}", "dimension title {json.title}", "batch drop"}, "batch needs a batch dimension"},
	} {
		src := caddyfile(c.lines...)
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want one containing %q", c.lines, err, c.want)
			continue
		}
		// The line is the last of the lines given but for the dimension
		// errors, which are at the dimension's line.
		line := 3 + len(c.lines) - 1
		if strings.HasPrefix(c.want, "dimension title") {
			line = 4
		}
		if !strings.HasSuffix(err.Error(), fmt.Sprintf("at Caddyfile:%d", line)) {
			t.Errorf("%q: error %v does not name line %d", c.lines, err, line)
		}
	}

	handler := func(fields string) string {
		return fmt.Sprintf(`{"admin":{"listen":"localhost:%d","config":{"persist":false}},`, adminPort(t)) + `"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[{"handler":"frequency_cap",` + fields +
			`,"rules":[{"name":"r","by":["recipient","title"],"limit":2,"window":"1m"}]}]}]}}}}}`
	}
	for _, c := range []struct{ fields, want string }{
		{`"dimensions":{"recipient":"{json.a.*.to}","title":"{json.b.*.title}"}`, `dimension title: "b.*.title" does not follow the batch dimension "a.*.to"`},
		{`"dimensions":{"recipient":"{json.*.to}","title":"{json.*.title}"},"splice":"expo"`, "splice expo needs batch drop"},
		{`"dimensions":{"recipient":"{json.*.to}","title":"{json.*.title}"},"max_batch":65536`, "max_batch must be 1 to 65535"},
		{`"dimensions":{"recipient":"{json.*.to}","title":"{json.*.title}"},"batch":"all"`, `batch must be reject or drop, not "all"`},
		{`"dimensions":{"recipient":"{json.to}","title":"{json.title}"},"max_batch":5`, "need a batch dimension"},
	} {
		res, err := adminClient.Post(fmt.Sprintf("http://localhost:%d/load", adminPort(t)), "application/json", strings.NewReader(handler(c.fields)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var f failure
		_ = json.Unmarshal(b, &f)
		if res.StatusCode == http.StatusOK || !strings.Contains(f.Error, c.want) {
			t.Errorf("%s: load answered %d %s, want an error containing %q", c.fields, res.StatusCode, b, c.want)
		}
	}
}

// TestBatchCluster proves batch reject on a Redis Cluster with entries on
// different shards: one capped recipient refuses the batch and nothing is
// recorded on any shard; a batch of the others is admitted and recorded
// on each.
func TestBatchCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	// One recipient on each master.
	var recipients []string
	owners := map[string]bool{}
	for i := 0; len(recipients) < 3 && i < 1000; i++ {
		r := fmt.Sprintf("u%d", i)
		if m := c.MasterOf(t, r); !owners[m.Addr] {
			owners[m.Addr] = true
			recipients = append(recipients, r)
		}
	}
	if len(recipients) < 3 {
		t.Fatalf("found recipients on %d masters", len(recipients))
	}
	up := startUpstream(t)
	name := batchName()
	redisLines := "redis {\n\t\t\taddress " + strings.Join(c.Addrs(), " ") + "\n\t\t\tcluster\n\t\t\ttimeout 5s\n\t\t}\n\t\ton_error deny"
	g := startGateway(t, limitsSite(name, up.addr(), redisLines))
	capped := recipients[2]
	for range 5 {
		expectStatus(t, g.post("/push/send", "application/json", fmt.Sprintf(`[{"to":%q}]`, capped)), http.StatusOK)
	}
	all := fmt.Sprintf(`[{"to":[%q,%q]},{"to":%q}]`, recipients[0], recipients[1], capped)
	a := g.post("/push/send", "application/json", all)
	expectStatus(t, a, http.StatusTooManyRequests)
	if p := a.batchDenial(t); len(p.Denied) != 1 || p.Denied[0].Path != "1.to" {
		t.Errorf("denied %+v", p.Denied)
	}
	for _, r := range recipients[:2] {
		expectUsage(t, usageOf(t, name, "recipient="+r), map[string][2]int64{"minute": {0, 5}})
	}
	expectStatus(t, g.post("/push/send", "application/json", fmt.Sprintf(`[{"to":[%q,%q]}]`, recipients[0], recipients[1])), http.StatusOK)
	for _, r := range recipients[:2] {
		expectUsage(t, usageOf(t, name, "recipient="+r), map[string][2]int64{"minute": {1, 4}})
	}
	expectUsage(t, usageOf(t, name, "recipient="+capped), map[string][2]int64{"minute": {5, 0}})
}
