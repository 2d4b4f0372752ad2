package caddymodule_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// exported is what a /metrics scrape exposes: for each series name (a
// histogram's _bucket, _sum and _count separately), each label name, and
// the values seen for it.
type exported map[string]map[string]map[string]bool

// parseExposition reads the Prometheus text format.
func parseExposition(t *testing.T, text string) exported {
	t.Helper()
	out := exported{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	pair := regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"`)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			t.Fatalf("metrics line %q", line)
		}
		name := line[:end]
		labels := out[name]
		if labels == nil {
			labels = map[string]map[string]bool{}
			out[name] = labels
		}
		if line[end] == '{' {
			closing := strings.LastIndexByte(line, '}')
			for _, m := range pair.FindAllStringSubmatch(line[end+1:closing], -1) {
				if labels[m[1]] == nil {
					labels[m[1]] = map[string]bool{}
				}
				labels[m[1]][m[2]] = true
			}
		}
	}
	return out
}

// promToken is one lexeme of a PromQL expression.
type promToken struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, 'p' punctuation
	text string
}

// lexPromQL splits a PromQL expression into tokens. Grafana's interval
// variables ($__rate_interval, ...) stand for a duration; any other $
// outside a string is an error, since the expression would not be PromQL.
func lexPromQL(expr string) ([]promToken, error) {
	expr = regexp.MustCompile(`\$__[a-z_]+|\$\{__[a-z_]+\}`).ReplaceAllString(expr, "5m")
	var toks []promToken
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment runs to the end of the line
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, promToken{'s', expr[i+1 : j]})
			i = j + 1
		case c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z' || expr[j] >= '0' && expr[j] <= '9') {
				j++
			}
			toks = append(toks, promToken{'i', expr[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.':
			j := i
			for j < len(expr) && (expr[j] == '.' || expr[j] >= '0' && expr[j] <= '9' || expr[j] >= 'a' && expr[j] <= 'z' || expr[j] >= 'A' && expr[j] <= 'Z') {
				j++
			}
			toks = append(toks, promToken{'n', expr[i:j]})
			i = j
		case c == '$':
			return nil, fmt.Errorf("template variable outside a string at %d: %q", i, expr[i:])
		default:
			if i+1 < len(expr) && strings.Contains("=~ != !~ == >= <=", expr[i:i+2]) {
				toks = append(toks, promToken{'p', expr[i : i+2]})
				i += 2
				continue
			}
			toks = append(toks, promToken{'p', string(c)})
			i++
		}
	}
	return toks, nil
}

// promMatcher is one label matcher of a selector.
type promMatcher struct{ label, op, value string }

// promSelector is a vector selector: a metric name and its matchers.
type promSelector struct {
	metric   string
	matchers []promMatcher
}

// promNames are the names an expression uses: its selectors, and the labels
// of its by, without, on, ignoring and group_* clauses (and the label
// argument of Grafana's label_values).
type promNames struct {
	selectors []promSelector
	grouping  []string
}

var promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true}

var promAggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}

var promGrouping = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// parsePromQL finds the names an expression uses. It knows enough PromQL
// for dashboards and alert rules: selectors with matchers, function and
// aggregation calls, grouping clauses, binary operators, range and
// subquery brackets, offsets; it does not check that the expression is
// valid (promtool does that for the rules).
func parsePromQL(expr string) (promNames, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return promNames{}, err
	}
	var out promNames
	next := func(i int) promToken {
		if i+1 < len(toks) {
			return toks[i+1]
		}
		return promToken{}
	}
	matchers := func(i int) ([]promMatcher, int, error) { // i is at "{"
		var ms []promMatcher
		for i++; i < len(toks); {
			if toks[i].text == "}" {
				return ms, i + 1, nil
			}
			if i+2 >= len(toks) || toks[i].kind != 'i' || toks[i+1].kind != 'p' || toks[i+2].kind != 's' {
				return nil, i, fmt.Errorf("malformed matcher near %q", toks[i].text)
			}
			ms = append(ms, promMatcher{toks[i].text, toks[i+1].text, toks[i+2].text})
			i += 3
			if i < len(toks) && toks[i].text == "," {
				i++
			}
		}
		return nil, i, fmt.Errorf("unterminated matchers")
	}
	for i := 0; i < len(toks); {
		t := toks[i]
		switch {
		case t.text == "[":
			for i < len(toks) && toks[i].text != "]" {
				i++
			}
			i++
		case t.text == "{":
			ms, j, err := matchers(i)
			if err != nil {
				return out, err
			}
			sel := promSelector{}
			for _, m := range ms {
				if m.label == "__name__" && m.op == "=" {
					sel.metric = m.value
				} else {
					sel.matchers = append(sel.matchers, m)
				}
			}
			out.selectors = append(out.selectors, sel)
			i = j
		case t.kind == 'i' && promGrouping[strings.ToLower(t.text)] && next(i).text == "(":
			for i += 2; i < len(toks) && toks[i].text != ")"; i++ {
				if toks[i].kind == 'i' {
					out.grouping = append(out.grouping, toks[i].text)
				}
			}
			i++
		case t.kind == 'i' && t.text == "label_values" && next(i).text == "(":
			// label_values(<selector>, <label>): the selector is read as
			// usual; the label is the last identifier before ")".
			depth, j := 0, i+1
			for ; j < len(toks); j++ {
				if toks[j].text == "(" {
					depth++
				} else if toks[j].text == ")" {
					if depth--; depth == 0 {
						break
					}
				}
			}
			if j >= len(toks) || toks[j-1].kind != 'i' || toks[j-2].text != "," {
				return out, fmt.Errorf("label_values needs a selector and a label")
			}
			out.grouping = append(out.grouping, toks[j-1].text)
			inner, err := parsePromQL(joinTokens(toks[i+2 : j-2]))
			if err != nil {
				return out, err
			}
			out.selectors = append(out.selectors, inner.selectors...)
			out.grouping = append(out.grouping, inner.grouping...)
			i = j + 1
		case t.kind == 'i' && (next(i).text == "(" || promKeywords[strings.ToLower(t.text)] ||
			promAggregations[strings.ToLower(t.text)] && promGrouping[strings.ToLower(next(i).text)]):
			i++ // a function, an aggregation (sum by (x) (...)) or an operator
		case t.kind == 'i':
			sel := promSelector{metric: t.text}
			i++
			if i < len(toks) && toks[i].text == "{" {
				ms, j, err := matchers(i)
				if err != nil {
					return out, err
				}
				sel.matchers, i = ms, j
			}
			out.selectors = append(out.selectors, sel)
		default:
			i++
		}
	}
	return out, nil
}

// joinTokens writes tokens back as an expression (strings re-quoted).
func joinTokens(toks []promToken) string {
	var b strings.Builder
	for _, t := range toks {
		if t.kind == 's' {
			b.WriteString(fmt.Sprintf("%q ", t.text))
		} else {
			b.WriteString(t.text + " ")
		}
	}
	return b.String()
}

// plainAlternatives matches a regex matcher that is only literal values
// separated by |, which are then checked one by one.
var plainAlternatives = regexp.MustCompile(`^[A-Za-z0-9_.-]+(\|[A-Za-z0-9_.-]+)*$`)

// checkPromQL lists what expr names that the scrape does not export: a
// metric, a label of a metric (in a matcher), a label value (in an
// equality matcher or a regex of plain alternatives, unless it holds a
// template variable), or a grouping label that none of its metrics has.
func checkPromQL(expr string, exp exported) []string {
	names, err := parsePromQL(expr)
	if err != nil {
		return []string{"cannot read: " + err.Error()}
	}
	var problems []string
	ours := false
	labels := map[string]bool{}
	for _, sel := range names.selectors {
		ours = ours || strings.HasPrefix(sel.metric, "caddy_frequency_cap_")
		series, ok := exp[sel.metric]
		if !ok {
			problems = append(problems, fmt.Sprintf("metric %s is not exported", sel.metric))
			continue
		}
		for l := range series {
			labels[l] = true
		}
		for _, m := range sel.matchers {
			values, ok := series[m.label]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s has no label %s", sel.metric, m.label))
			case strings.Contains(m.value, "$"):
			case m.op == "=" && !values[m.value]:
				problems = append(problems, fmt.Sprintf("no %s series has %s=%q", sel.metric, m.label, m.value))
			case m.op == "=~" && plainAlternatives.MatchString(m.value):
				for _, v := range strings.Split(m.value, "|") {
					if !values[v] {
						problems = append(problems, fmt.Sprintf("no %s series has %s=%q", sel.metric, m.label, v))
					}
				}
			}
		}
	}
	for _, l := range names.grouping {
		if !labels[l] {
			problems = append(problems, fmt.Sprintf("grouping label %s is on none of the metrics", l))
		}
	}
	if !ours {
		problems = append(problems, "names no caddy_frequency_cap_ metric")
	}
	return problems
}

// dashboardExprs returns every PromQL expression of a Grafana dashboard:
// the panels' targets (rows' nested panels too) and the query variables.
func dashboardExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	var panels func(raw []json.RawMessage)
	panels = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p struct {
				Title   string            `json:"title"`
				Panels  []json.RawMessage `json:"panels"`
				Targets []struct {
					RefID string `json:"refId"`
					Expr  string `json:"expr"`
				} `json:"targets"`
			}
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: panel: %v", path, err)
			}
			for _, tg := range p.Targets {
				out[fmt.Sprintf("panel %q target %s", p.Title, tg.RefID)] = tg.Expr
			}
			panels(p.Panels)
		}
	}
	panels(dash.Panels)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		var s string
		if json.Unmarshal(v.Query, &s) == nil {
			q.Query = s
		} else if err := json.Unmarshal(v.Query, &q); err != nil {
			t.Fatalf("%s: variable %s: %v", path, v.Name, err)
		}
		out["variable "+v.Name] = q.Query
	}
	return out
}

// rulesExprs returns every expr of a Prometheus rules file.
func rulesExprs(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			out[fmt.Sprintf("group %s rule %s%s", g.Name, r.Alert, r.Record)] = r.Expr
		}
	}
	return out
}

// TestMonitoringExamples proves examples/monitoring against a live Caddy:
// after admitted, denied, dry-run, refunded, incomplete and locally decided
// sends, every PromQL expression of the Grafana dashboard and the alert
// rules names only metrics, labels and label values that its /metrics exports (a
// histogram's _bucket, _sum and _count included). A renamed metric or
// label fails here before it blanks a dashboard or silences an alert.
func TestMonitoringExamples(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	handle /live {
		frequency_cap {
			name       mon_live
			key_prefix %s
			refund_on  5xx
			dimension recipient {json.to}
			rule per_minute {
				by     recipient
				limit  2
				window 1m
			}
		}
		reverse_proxy %s
	}
	handle /dry {
		frequency_cap {
			name       mon_dry
			key_prefix %s
			dry_run
			dimension recipient {json.to}
			rule once {
				by     recipient
				limit  1
				window 1m
			}
		}
		reverse_proxy %[2]s
	}
	handle /local {
		frequency_cap {
			name       mon_local
			key_prefix %[4]s
			# Nothing listens there: every decision falls back to the local store.
			redis      redis://127.0.0.1:%[5]d/0
			on_error   local 2
			dimension recipient {json.to}
			rule per_minute {
				by     recipient
				limit  2
				window 1m
			}
		}
		reverse_proxy %[2]s
	}`, testPrefix(), up.addr(), testPrefix(), testPrefix(), freePort(t)))
	expectStatus(t, g.send("/live", map[string]any{"to": "m1"}), http.StatusOK)
	expectStatus(t, g.send("/live", map[string]any{"to": "m1"}), http.StatusOK)
	expectStatus(t, g.send("/live", map[string]any{"to": "m1"}), http.StatusTooManyRequests)
	expectStatus(t, g.send("/live", map[string]any{"to": "m2"}, "X-Want-Status: 502"), http.StatusBadGateway)
	expectStatus(t, g.send("/live", map[string]any{}), http.StatusBadRequest)
	expectStatus(t, g.send("/dry", map[string]any{"to": "m1"}), http.StatusOK)
	expectStatus(t, g.send("/dry", map[string]any{"to": "m1"}), http.StatusOK)
	expectStatus(t, g.send("/local", map[string]any{"to": "m1"}), http.StatusOK)
	// The admin API's operations, so that op="usage" and op="reset" exist.
	expectStatus(t, adminDo(t, http.MethodGet, "/frequency_cap/mon_live/usage?recipient=m1"), http.StatusOK)
	expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/mon_live/usage?recipient=m1"), http.StatusOK)

	// mon_local's Redis is down: the start's question of its write path
	// finds no answer, and the node is listed as unknown, in the
	// background.
	_, text := scrape(t)
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(text, "caddy_frequency_cap_store_write_path{"); {
		if time.Now().After(deadline) {
			t.Fatal("no caddy_frequency_cap_store_write_path series for mon_local's Redis")
		}
		time.Sleep(50 * time.Millisecond)
		_, text = scrape(t)
	}
	exp := parseExposition(t, text)
	// The traffic above gave every outcome a series of its own.
	for _, outcome := range []string{"allowed", "denied", "dry_run_deny", "error"} {
		if !exp["caddy_frequency_cap_decisions_total"]["outcome"][outcome] {
			t.Errorf("no decisions series has outcome %q", outcome)
		}
	}
	for _, store := range []string{"memory", "local"} {
		if !exp["caddy_frequency_cap_decisions_by_store_total"]["store"][store] {
			t.Errorf("no decisions-by-store series has store %q", store)
		}
	}

	exprs := dashboardExprs(t, "../examples/monitoring/dashboard.json")
	if len(exprs) < 10 {
		t.Errorf("the dashboard has %d expressions; did its layout change?", len(exprs))
	}
	for where, e := range rulesExprs(t, "../examples/monitoring/rules.yml") {
		exprs[where] = e
	}
	wheres := make([]string, 0, len(exprs))
	for w := range exprs {
		wheres = append(wheres, w)
	}
	sort.Strings(wheres)
	for _, w := range wheres {
		for _, p := range checkPromQL(exprs[w], exp) {
			t.Errorf("%s: %s\n\t%s", w, p, exprs[w])
		}
	}

	// The check itself finds what it is for.
	for expr, want := range map[string]string{
		`rate(caddy_frequency_cap_decision_total[5m])`:                                  "metric caddy_frequency_cap_decision_total is not exported",
		`caddy_frequency_cap_decisions_total{outcome="deny"}`:                           `no caddy_frequency_cap_decisions_total series has outcome="deny"`,
		`caddy_frequency_cap_decisions_total{outcome=~"allowed|refused"}`:               `has outcome="refused"`,
		`sum by (recipient) (caddy_frequency_cap_decisions_total)`:                      "grouping label recipient",
		`caddy_frequency_cap_refunds_total{rule="x"}`:                                   "caddy_frequency_cap_refunds_total has no label rule",
		`histogram_quantile(0.9, rate(caddy_frequency_cap_store_duration_seconds[5m]))`: "caddy_frequency_cap_store_duration_seconds is not exported",
		`label_values(caddy_frequency_cap_refunds_total, op)`:                           "grouping label op",
		`up`: "names no caddy_frequency_cap_ metric",
	} {
		if got := strings.Join(checkPromQL(expr, exp), "; "); !strings.Contains(got, want) {
			t.Errorf("checking %s found %q, want %q", expr, got, want)
		}
	}
}
