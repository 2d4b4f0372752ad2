package caddymodule_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// Hostile values through a real in-process Caddy: huge header values, many
// dimensions, values full of separators and braces, and JSON paths that
// lead to objects, arrays, null and numbers.

// TestHostileHeaderValues proves a dimension from a 60 KB header works
// (the value is hashed into the key, and never echoed back; Caddy itself
// refuses request headers over 16 KiB with 431 unless the server's
// max_header_size is raised, as here), that values
// differing in one byte at either end are counted apart, and that no
// value can pass for the hash of another.
func TestHostileHeaderValues(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGatewayWith(t, "max_header_size 128KiB",
			capBlock("", redisLine, "dimension recipient {http.request.header.X-To}", ruleBlock("once", "recipient", 1))+
				"\treverse_proxy "+up.addr())

		send := func(to string) *answer { return g.post("/v1/send", "text/plain", "hi", "X-To: "+to) }
		huge := strings.Repeat("a", 60<<10)
		expectStatus(t, send(huge), http.StatusOK)
		denied := send(huge)
		expectStatus(t, denied, http.StatusTooManyRequests)
		if len(denied.body) > 2000 || strings.Contains(fmt.Sprint(denied.header), "aaaaaaaa") {
			t.Errorf("the denial echoes the value: %d body bytes, header %v", len(denied.body), denied.header)
		}
		expectStatus(t, send(huge[:len(huge)-1]+"b"), http.StatusOK)
		expectStatus(t, send("b"+huge[1:]), http.StatusOK)

		long := strings.Repeat("z", 65)
		sum := sha256.Sum256([]byte(long))
		for _, v := range []string{long, "#" + hex.EncodeToString(sum[:16]), strings.Repeat("z", 64)} {
			expectStatus(t, send(v), http.StatusOK)
		}
		expectStatus(t, send(long), http.StatusTooManyRequests)
	})
}

// TestHostileManyDimensions proves 50 dimensions and 100 rules work in one
// decision: rules over up to 50 dimensions, and 50 rules each with a
// different first dimension.
func TestHostileManyDimensions(t *testing.T) {
	const n = 50
	var dims, chain, solo strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&dims, "dimension d%d {http.request.header.X-D%d}\n\t\t", i, i)
		by := make([]string, i+1)
		for j := range by {
			by[j] = "d" + strconv.Itoa(j)
		}
		fmt.Fprintf(&chain, "%s\n\t\t", ruleBlock(fmt.Sprintf("chain%d", i), strings.Join(by, " "), 2))
		fmt.Fprintf(&solo, "%s\n\t\t", ruleBlock(fmt.Sprintf("solo%d", i), fmt.Sprintf("d%d", i), 2))
	}
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, capBlock("/chain", redisLine, dims.String(), chain.String())+
			capBlock("/solo", redisLine, dims.String(), solo.String())+
			"\treverse_proxy "+up.addr())

		send := func(path string, change int, value string) *answer {
			headers := make([]string, n)
			for i := range headers {
				v := "v" + strconv.Itoa(i)
				if i == change {
					v = value
				}
				headers[i] = fmt.Sprintf("X-D%d: %s", i, v)
			}
			return g.post(path, "text/plain", "hi", headers...)
		}
		violated := func(a *answer) int { return len(a.problem(t).Violated) }
		for _, path := range []string{"/chain", "/solo"} {
			for i := 0; i < 2; i++ {
				a := send(path, -1, "")
				expectStatus(t, a, http.StatusOK)
				if got := strings.Count(a.header.Get("RateLimit-Policy"), ";q=2;"); got != n {
					t.Fatalf("%s: RateLimit-Policy names %d rules, want %d", path, got, n)
				}
			}
			a := send(path, -1, "")
			expectStatus(t, a, http.StatusTooManyRequests)
			if v := violated(a); v != n {
				t.Errorf("%s: %d rules violated, want %d", path, v, n)
			}
			// Another last value frees the rules that count it: chain49
			// and solo49.
			a = send(path, n-1, "other")
			expectStatus(t, a, http.StatusTooManyRequests)
			if v := violated(a); v != n-1 {
				t.Errorf("%s with another d49: %d rules violated, want %d", path, v, n-1)
			}
		}
		// Another first value frees every chain rule.
		expectStatus(t, send("/chain", 0, "other"), http.StatusOK)
		if got := up.count(); got != 5 {
			t.Errorf("upstream got %d, want 5", got)
		}
	})
}

// trickyValues differ from one another only in separators, braces,
// escapes, placeholders, Unicode forms and control characters; each must
// count on its own.
var trickyValues = []string{
	"a", "{a}", "}{", "{", "}", "{}", "a&b=c", "a&b", "a=b", "a$b", "$", "a.b", "a b", "a+b", "a%20b",
	"%7D", "%7d", "%", "%25", "%2525", "#x", "%23x", "#", "a\x00b", "a\x00", "\x00", "a\tb", "a\nb",
	"\\", "\"", "é", "e\u0301", "张三", "👋", "\ufffd", "{json.to}", "{http.request.host}", "{env.HOME}",
	"x{y}z", "fc:recipient{a}", "recipient=a", "a&recipient=b", "=", "&",
}

// trickyPairs are two-dimension tuples whose values, joined with any
// separator, would read alike.
var trickyPairs = [][2]string{
	{"1&b=2", "3"}, {"1", "2&b=3"}, {"1=", "2"}, {"1", "=2"}, {"x$", "y"}, {"x", "$y"},
	{"}{", "a"}, {"}", "{a"}, {"%26", "b"}, {"&", "b"},
}

// TestHostileSeparators proves that distinct values never share a count,
// whether a value is a rule's first dimension (the key's hash tag) or a
// later one (the sub-log), and whether it comes from JSON (NUL by \u0000),
// a form or a header; and that a value that looks like a placeholder is
// a value, never resolved again. (A first dimension is trimmed at its
// ends, so it is tried with the values that keep theirs.)
func TestHostileSeparators(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		once := ruleBlock("once", "to", 1)
		g := startGateway(t, capBlock("/first", redisLine, "dimension to {json.to}", once)+
			capBlock("/second", redisLine, "dimension fixed {http.request.header.X-Fixed}", "dimension to {json.to}", ruleBlock("once", "fixed to", 1))+
			capBlock("/pair", redisLine, "dimension fixed {http.request.header.X-Fixed}", "dimension a {json.a}", "dimension b {json.b}", ruleBlock("once", "fixed a b", 1))+
			capBlock("/form", redisLine, "dimension to {form.to}", once)+
			capBlock("/header", redisLine, "dimension to {http.request.header.X-To}", once)+
			"\treverse_proxy "+up.addr())

		jsonOf := func(kv ...string) string {
			m := map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		host := strings.TrimPrefix(g.url, "http://")
		// A rule's first dimension is trimmed of white space and control
		// characters at its ends ("a\x00" is a: TestHostileJSONShapes),
		// and refuses a NUL within (TestKeyingValueWithNUL), so it is
		// held to the values that keep their ends and have none.
		var keyed []string
		for _, v := range trickyValues {
			if jsonbatch.TrimKey(v) == v && !strings.Contains(v, "\x00") {
				keyed = append(keyed, v)
			}
		}
		headerValues := []string{"{http.request.host}", host, "127.0.0.1", "}{", "{a}", "a&b=c", "%7D", "#x", "é", "e\u0301"}
		type sender struct {
			name   string
			values []string
			send   func(v string) *answer
		}
		senders := []sender{
			{"json first", keyed, func(v string) *answer {
				return g.post("/first", "application/json", jsonOf("to", v))
			}},
			{"json second", trickyValues, func(v string) *answer {
				return g.post("/second", "application/json", jsonOf("to", v), "X-Fixed: f")
			}},
			{"form", keyed, func(v string) *answer {
				return g.post("/form", "application/x-www-form-urlencoded", url.Values{"to": {v}}.Encode())
			}},
			{"header", headerValues, func(v string) *answer {
				return g.post("/header", "text/plain", "hi", "X-To: "+v)
			}},
		}
		for _, s := range senders {
			for _, v := range s.values {
				if a := s.send(v); a.status != http.StatusOK {
					t.Errorf("%s: first send of %q: status %d %s (counted with another value?)", s.name, v, a.status, a.body)
				}
			}
			for _, v := range s.values {
				if a := s.send(v); a.status != http.StatusTooManyRequests {
					t.Errorf("%s: second send of %q: status %d, want 429", s.name, v, a.status)
				}
			}
		}
		for _, p := range trickyPairs {
			if a := g.post("/pair", "application/json", jsonOf("a", p[0], "b", p[1]), "X-Fixed: f"); a.status != http.StatusOK {
				t.Errorf("pair %q: status %d (counted with another pair?)", p, a.status)
			}
		}
		for _, p := range trickyPairs {
			if a := g.post("/pair", "application/json", jsonOf("a", p[0], "b", p[1]), "X-Fixed: f"); a.status != http.StatusTooManyRequests {
				t.Errorf("pair %q again: status %d, want 429", p, a.status)
			}
		}
		if want := 2*len(keyed) + len(headerValues) + len(trickyPairs) + len(trickyValues); up.count() != want {
			t.Errorf("upstream got %d, want %d", up.count(), want)
		}
	})
}

// TestHostileJSONShapes proves what {json.to}, a dimension that keys the
// counts, makes of what the path reaches. It takes one value as readers
// take it: a string trimmed of white space and invisible marks (" dave",
// "dave\u200b" and "dave" are one recipient to any upstream that trims),
// an integer in digits (counted with the string of its text), true and
// false as text. An object or array (["dave"] is delivered to dave), a
// number not written as an integer in digits (1.50, 15e-1 and 1.5 are one
// number to readers) or past 2^53 (rounded by JavaScript: an id that big
// is a string), null or white space alone are refused (400), as is
// a body that names a member twice or is not UTF-8, because readers
// differ on what it says.
func TestHostileJSONShapes(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		dimension  recipient {json.to}
		%s
	}
	reverse_proxy %s`, testPrefix(), ruleBlock("once", "recipient", 1), up.addr()))

	for _, tc := range []struct {
		body   string
		status int
	}{
		{`{"to":{"id":1,"via":"sms"}}`, 400},
		{`{"to":["dave"]}`, 400},
		{`{"to":[]}`, 400},
		{`{"to":{}}`, 400},
		{`{"to":1.50}`, 400},
		{`{"to":15e-1}`, 400},
		{`{"to":-0}`, 400},
		{`{"to":42}`, 200},
		{`{"to":"42"}`, 429},
		{`{"to":12345678901234567890123}`, 400},
		{`{"to":9007199254740993}`, 400},
		{`{"to":"9007199254740993"}`, 200},
		{`{"to":"erin\u200e"}`, 200},
		{`{"to":"\u00aderin\u034f\ufe0f"}`, 429},
		{`{"to":true}`, 200},
		{`{"to":"true"}`, 429},
		{`{"to":false}`, 200},
		{`{"to":" dave"}`, 200},
		{`{"to":"dave\u200b"}`, 429},
		{`{"to":"\u00a0dave\n"}`, 429},
		{`{"to":"   "}`, 400},
		{`{"to":null}`, 400},
		{`{"to":"alice","to":"mallory"}`, 400},
		{`{"to":"alice","\u0074o":"mallory"}`, 400},
		{`{"to":"alice","meta":{"k":1,"k":1}}`, 400},
		{"{\"to\":\"al\xffice\"}", 400},
		{`{"to":"alice"}`, 200},
	} {
		a := g.post("/v1/send", "application/json", tc.body)
		if a.status != tc.status {
			t.Errorf("%s: status %d, want %d; %s", tc.body, a.status, tc.status, a.body)
		}
	}
	if got := up.count(); got != 7 {
		t.Errorf("upstream got %d, want 7", got)
	}
}

// TestHostileFoldedNames proves a body is refused when it names, along a
// path the cap set reads, a member that Go's encoding/json takes for the
// one read (it matches names without regard to case, ſ and the Kelvin
// sign included, and the last match wins): counted for "decoy" and
// delivered to "victim" otherwise, in a single send, in a batch, and for
// the exempt placeholder. Names elsewhere in the body pass.
func TestHostileFoldedNames(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	handle /one {
		frequency_cap {
			key_prefix %s
			dimension  recipient {json.to}
			exempt {json.priority} high
			%s
		}
		reverse_proxy %s
	}
	handle /batch {
		frequency_cap {
			key_prefix %s
			name       batch
			dimension  recipient {json.notifications.*.tokens.*}
			%s
		}
		reverse_proxy %s
	}`, testPrefix(), ruleBlock("once", "recipient", 1), up.addr(), testPrefix(), ruleBlock("once", "recipient", 1), up.addr()))

	for _, tc := range []struct {
		path, body string
		status     int
	}{
		{"/one", `{"to":"decoy","To":"victim"}`, 400},
		{"/one", `{"To":"victim"}`, 400},
		{"/one", `{"tO":"victim","to":"decoy"}`, 400},
		{"/one", `{"to":"decoy","priority":"low","Priority":"high"}`, 400},
		{"/one", `{"to":"decoy","Priority_":"high","priority":"low"}`, 200},
		{"/one", `{"to":"other","toy":"x","data":{"To":"y"}}`, 200},
		{"/batch", `{"notifications":[{"tokens":["decoy"],"platform":2,"message":"hi","Tokens":["victim"]}]}`, 400},
		{"/batch", `{"notifications":[{"tokens":["t1"]},{"TOKENS":["victim"]}]}`, 400},
		{"/batch", `{"notifications":[{"tokens":["t1"],"token\u017f":["victim"]}]}`, 400},
		{"/batch", `{"notifications":[{"to\u212aens":["victim"]}]}`, 400},
		{"/batch", `{"notifications":[{"tokens":["t2"],"data":{"Tokens":"x"}}]}`, 200},
	} {
		a := g.post(tc.path, "application/json", tc.body)
		if a.status != tc.status {
			t.Errorf("%s %s: status %d, want %d; %s", tc.path, tc.body, a.status, tc.status, a.body)
		}
		if tc.status == 400 && !strings.Contains(string(a.body), "which encoding/json reads as one name") {
			t.Errorf("%s %s: %s does not say why", tc.path, tc.body, a.body)
		}
	}
	if got := up.count(); got != 3 {
		t.Errorf("upstream got %d, want 3", got)
	}
}

// TestHostileContentType proves a body is read only as the format it
// declares: a form body whose JSON reading counts "decoy" (an upstream
// that parses by Content-Type reads to=victim from it) is answered 415,
// as is a JSON body sent to a cap set that reads a form; a JSON type with
// parameters or a +json suffix, and no type at all, are read; with
// any_content_type the declared type is not asked.
func TestHostileContentType(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	handle /json {
		frequency_cap {
			key_prefix %s
			dimension  recipient {json.to}
			%s
		}
		reverse_proxy %s
	}
	handle /form {
		frequency_cap {
			key_prefix %s
			name       form
			dimension  recipient {form.to}
			%s
		}
		reverse_proxy %s
	}
	handle /any {
		frequency_cap {
			key_prefix %s
			name       any
			dimension  recipient {json.to}
			any_content_type
			%s
		}
		reverse_proxy %s
	}`, testPrefix(), ruleBlock("once", "recipient", 1), up.addr(),
		testPrefix(), ruleBlock("once", "recipient", 1), up.addr(),
		testPrefix(), ruleBlock("once", "recipient", 1), up.addr()))

	smuggled := `{"to":"decoy","a":"&to=victim&"}`
	for _, tc := range []struct {
		path, contentType, body string
		status                  int
	}{
		{"/json", "application/x-www-form-urlencoded", smuggled, 415},
		{"/json", "text/plain", `{"to":"t1"}`, 415},
		{"/json", "multipart/form-data; boundary=x", `{"to":"t1"}`, 415},
		{"/json", "application/json", `{"to":"t1"}`, 200},
		{"/json", "application/json; charset=utf-8", `{"to":"t2"}`, 200},
		{"/json", "application/vnd.api+json", `{"to":"t3"}`, 200},
		{"/json", "", `{"to":"t4"}`, 200},
		{"/form", "application/json", `to=decoy&x={"to":"victim"}`, 415},
		{"/form", "application/x-www-form-urlencoded", `to=f1`, 200},
		{"/any", "application/x-www-form-urlencoded", `{"to":"a1"}`, 200},
		{"/any", "application/x-www-form-urlencoded", `{"to":"a1"}`, 429},
	} {
		a := g.post(tc.path, tc.contentType, tc.body)
		if a.status != tc.status {
			t.Errorf("%s %q %s: status %d, want %d; %s", tc.path, tc.contentType, tc.body, a.status, tc.status, a.body)
		}
		if tc.status == 415 && !strings.Contains(string(a.body), "any_content_type") {
			t.Errorf("%s %q: %s does not say what to do", tc.path, tc.contentType, a.body)
		}
	}
	if got := up.count(); got != 6 {
		t.Errorf("upstream got %d, want 6", got)
	}
}

// TestHostileRepeatedFormField proves a form body that gives a field the
// cap set reads twice is refused, as a JSON body naming a member twice
// is: Go reads the first, PHP and Rails the last, so it would be counted
// for one recipient and delivered to another. Fields no placeholder reads
// may repeat (Twilio's MediaUrl does).
func TestHostileRepeatedFormField(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		dimension  recipient {form.To}
		%s
	}
	reverse_proxy %s`, testPrefix(), ruleBlock("once", "recipient", 1), up.addr()))
	const form = "application/x-www-form-urlencoded"
	for _, tc := range []struct {
		body   string
		status int
	}{
		{"To=decoy&To=victim", 400},
		{"To=decoy&Body=hi&To=victim", 400},
		{"To=%2B15550100&MediaUrl=a&MediaUrl=b", 200},
		{"To=%2B15550100", 429},
	} {
		a := g.post("/", form, tc.body)
		if a.status != tc.status {
			t.Errorf("%s: status %d, want %d; %s", tc.body, a.status, tc.status, a.body)
		}
	}
	if got := up.count(); got != 1 {
		t.Errorf("upstream got %d, want 1", got)
	}
}

// TestHostileRepeatedQueryAndHeader proves a request that gives a query
// parameter or a header field a placeholder reads more than once is
// refused: Caddy joins the values with commas ("alice,x1", a recipient of
// its own), while an upstream reads one of them and delivers to alice
// past her cap. So is a form field given in the body and in the query
// (Go reads the body's, Flask's request.values the query's), a form value
// that is not UTF-8, a query with a ";" (Go drops the pair; Rack splits
// there and reads to=alice), and a body that declares two Content-Types
// or a charset other than UTF-8 (body-parser decodes utf-7: "+AGE-lice"
// is alice to it). So is a form or query that names a field read under a
// name PHP reads as it (" To", "To[]", "To[0]", "To\x00x": PHP's $_POST
// of "To=ann&%20To=bob" sends to bob).
// Parameters and fields no placeholder reads may repeat.
func TestHostileRepeatedQueryAndHeader(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /q* {
		key_prefix %[1]s
		dimension  recipient {query.to}
		dimension  channel {header.X-Channel}
		on_missing skip channel
		%[2]s
		%[3]s
	}
	frequency_cap /f* {
		name form
		key_prefix %[1]s
		dimension  recipient {form.To}
		%[4]s
	}
	frequency_cap /n* {
		name nested
		key_prefix %[1]s
		dimension  recipient {form.message[to]}
		%[4]s
	}
	reverse_proxy %[5]s`, testPrefix(), ruleBlock("once", "recipient", 1), ruleBlock("per_channel", "recipient channel", 1),
		ruleBlock("once_form", "recipient", 1), up.addr()))
	const form = "application/x-www-form-urlencoded"
	// post sends body with every header line given, repeats kept.
	post := func(path, body string, lines ...string) *answer {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, g.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			k, v, _ := strings.Cut(l, ":")
			req.Header.Add(k, strings.TrimSpace(v))
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return &answer{status: res.StatusCode, header: res.Header, body: b}
	}
	text, formType := "Content-Type: text/plain", "Content-Type: "+form
	for _, tc := range []struct {
		name   string
		a      *answer
		status int
	}{
		{"to twice", post("/q?to=alice&to=x1", "hi", text), 400},
		{"alice", post("/q?to=alice&tag=a&tag=b", "hi", text), 200},
		{"alice again", post("/q?to=alice", "hi", text), 429},
		{"X-Channel twice", post("/q?to=bob", "hi", text, "X-Channel: sms", "X-Channel: n1"), 400},
		{"To in body and query", post("/f?To=%2B15550100", "To=%2B19990001", formType), 400},
		{"To not UTF-8", post("/f", "To=%2B1555%F1", formType), 400},
		{"two Content-Types", post("/f", "To=%2B15550200", formType, "Content-Type: application/json"), 415},
		{"a charset other than UTF-8", post("/f", "To=%2B15550200", formType+"; charset=utf-7"), 415},
		{"to after a semicolon", post("/q?to=u1&x=1;to=alice", "hi", text), 400},
		// Python and Node read each bad byte as U+FFFD: one recipient
		// there, one a byte here.
		{"to not UTF-8", post("/q?to=carol%80", "hi", text), 400},
		{"to in UTF-8, U+FFFD", post("/q?to=carol%EF%BF%BD", "hi", text), 200},
		{"To and PHP's To: a leading space", post("/f", "To=%2B15550300&%20To=%2B19990003", formType), 400},
		{"To and PHP's To: an array", post("/f", "To=%2B15550300&To[]=%2B19990003", formType), 400},
		{"To and PHP's To: an indexed array", post("/f", "To=%2B15550300&To[0]=%2B19990003", formType), 400},
		{"To and PHP's To: after a NUL", post("/f", "To=%2B15550300&To%00x=%2B19990003", formType), 400},
		{"PHP's To alone", post("/f", "%20To=%2B19990003", formType), 400},
		{"to and PHP's to in the query", post("/q?to=carol&%20to=x3", "hi", text), 400},
		{"one form", post("/f", "To=%2B15550200", formType), 200},
		{"a nested field beside another", post("/n", "message%5Bto%5D=%2B15550400&message%5Bbody%5D=hi", formType), 200},
		{"a nested field and PHP's spelling of it", post("/n", "message%5Bto%5D=%2B15550401&%20message%5Bto%5D=%2B19990004", formType), 400},
	} {
		if tc.a.status != tc.status {
			t.Errorf("%s: status %d, want %d; %s", tc.name, tc.a.status, tc.status, tc.a.body)
		}
	}
	if got := up.count(); got != 4 {
		t.Errorf("upstream got %d, want 4", got)
	}
}

// TestHostileBatchKeys proves a batch's recipient entries are held to
// what a single send's recipient is (see TestHostileJSONShapes): " dave"
// is dave's entry, and an entry that is an object or a number not
// written as an integer in digits refuses the batch, naming where.
func TestHostileBatchKeys(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		dimension  recipient {json.*.to}
		%s
	}
	reverse_proxy %s`, testPrefix(), ruleBlock("once", "recipient", 1), up.addr()))
	for _, tc := range []struct {
		body, reason string
		status       int
	}{
		{`[{"to":"dave"},{"to":" dave\u200b"}]`, "", 429},
		{`[{"to":"erin"},{"to":{"a":"dave"}}]`, "dimension recipient at 1.to is an object", 400},
		{`[{"to":4.2e1}]`, "dimension recipient at 0.to is the number 4.2e1", 400},
		{`[{"to":"  "}]`, "missing value for dimension recipient at 0.to", 400},
		{`[{"to":"erin"}]`, "", 200},
	} {
		a := g.post("/v1/send", "application/json", tc.body)
		if a.status != tc.status || !strings.Contains(string(a.body), tc.reason) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.body, a.status, a.body, tc.status, tc.reason)
		}
	}
	if got := up.count(); got != 1 {
		t.Errorf("upstream got %d, want 1", got)
	}
}

// TestHostilePaths proves that a request whose path a dimension reads is
// refused when its path has a dot segment, an empty segment or an encoded
// slash: the placeholder reads the segments as sent, while a server or
// proxy that cleans the path delivers "/3/device/x/../tok" to tok (past
// tok's cap, counted for x) or shifts "//3/device/tok" by one. Clean paths,
// and paths of a cap set that reads no path, pass.
func TestHostilePaths(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /3/* {
		key_prefix %[1]s
		dimension recipient {http.request.uri.path.2}
		%[2]s
	}
	frequency_cap /j/* {
		key_prefix %[1]s
		dimension recipient {json.to}
		%[2]s
	}
	reverse_proxy %[3]s`, testPrefix(), ruleBlock("once", "recipient", 1), up.addr()))
	tok := unique("tok")
	raw := func(path string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, g.url+"/", strings.NewReader(`{"to":"`+unique("j")+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.URL.RawPath, req.URL.Path = path, mustUnescapePath(t, path)
		req.URL.Opaque = path // sent as written
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		path string
		want int
	}{
		{"/3/device/" + tok, 200},
		{"/3/device/" + tok + "/", 429},
		{"/3/device/x/../" + tok, 400},
		{"/3/device/x/%2e%2E/" + tok, 400},
		{"/3/device/./" + tok, 400},
		{"/3//device/" + tok, 400},
		{"/3/device/x%2F..%2F" + tok, 400},
		{"/3/device/" + tok + "%80", 400}, // not UTF-8: read as tok\uFFFD upstream, as %81 is
		{"/3/device/" + tok + "%EF%BF%BD", 200},
		{"/j/x/../y", 200},
	} {
		if got := raw(c.path); got != c.want {
			t.Errorf("%s: status %d, want %d", c.path, got, c.want)
		}
	}
}

func mustUnescapePath(t *testing.T, p string) string {
	t.Helper()
	u, err := url.PathUnescape(p)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
