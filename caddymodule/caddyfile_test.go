package caddymodule

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// TestUnmarshalCaddyfile proves that every subdirective lands in its JSON
// field, with nothing set that the Caddyfile did not say.
func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  *Handler
	}{
		{
			name: "seed config",
			input: `frequency_cap {
				dimension recipient {json.to}
				dimension content   {json.content}
				rule recipient_minute {
					by     recipient
					limit  15
					window 1m
				}
				rule same_content_59s {
					by     recipient content
					limit  2
					window 59s
				}
			}`,
			want: &Handler{
				Dimensions: map[string]string{"recipient": "{json.to}", "content": "{json.content}"},
				Rules: []RuleConfig{
					{Name: "recipient_minute", By: []string{"recipient"}, Limit: 15, Window: caddy.Duration(time.Minute)},
					{Name: "same_content_59s", By: []string{"recipient", "content"}, Limit: 2, Window: caddy.Duration(59 * time.Second)},
				},
			},
		},
		{
			name: "every setting",
			input: `frequency_cap {
				name       push
				redis      redis://127.0.0.1:6379/0 {
					timeout   50ms
					pool_size 32
				}
				key_prefix fc:
				on_error   deny
				on_missing skip
				refund_on  5xx 429
				dry_run
				max_body   64KiB
				status_code 503
				log_values
				dimension recipient {json.message.to.0}
				dimension channel   {http.request.header.X-Channel}
				rule channel_day {
					by       recipient channel
					limit    5
					calendar day {json.tz} Asia/Shanghai
				}
				rule coins_month {
					by       recipient
					limit    1000
					cost     {json.amount}
					calendar month
				}
				rule week_three {
					by       recipient
					limit    7
					cost     3
					calendar week Europe/Berlin
				}
			}`,
			want: &Handler{
				Name:       "push",
				Redis:      &RedisConfig{Config: redisstore.Config{URL: "redis://127.0.0.1:6379/0", PoolSize: 32}, Timeout: caddy.Duration(50 * time.Millisecond)},
				KeyPrefix:  "fc:",
				OnError:    "deny",
				OnMissing:  "skip",
				RefundOn:   []string{"5xx", "429"},
				DryRun:     true,
				MaxBody:    64 << 10,
				StatusCode: 503,
				LogValues:  true,
				Dimensions: map[string]string{"recipient": "{json.message.to.0}", "channel": "{http.request.header.X-Channel}"},
				Rules: []RuleConfig{
					{Name: "channel_day", By: []string{"recipient", "channel"}, Limit: 5, Calendar: "day", Zone: "{json.tz}", FallbackZone: "Asia/Shanghai"},
					{Name: "coins_month", By: []string{"recipient"}, Limit: 1000, Cost: "{json.amount}", Calendar: "month"},
					{Name: "week_three", By: []string{"recipient"}, Limit: 7, Cost: "3", Calendar: "week", Zone: "Europe/Berlin"},
				},
			},
		},
		{
			name: "redis block",
			input: `frequency_cap {
				redis {
					address         10.0.0.1:7000 10.0.0.2:7000
					cluster
					username        gw
					password        {env.REDIS_PASSWORD}
					tls
					tls_ca          /etc/ca.pem
					tls_server_name redis.internal
					dial_timeout    1s
				}
				dimension r {json.to}
				rule later_dimension {
					by     r late
					limit  1
					window 1h
				}
				dimension late {json.late}
			}`,
			want: &Handler{
				Redis: &RedisConfig{
					Config: redisstore.Config{
						Addresses: []string{"10.0.0.1:7000", "10.0.0.2:7000"}, Cluster: true, Username: "gw",
						Password: "{env.REDIS_PASSWORD}", TLS: true, TLSCA: "/etc/ca.pem", TLSServerName: "redis.internal",
					},
					DialTimeout: caddy.Duration(time.Second),
				},
				Dimensions: map[string]string{"r": "{json.to}", "late": "{json.late}"},
				Rules:      []RuleConfig{{Name: "later_dimension", By: []string{"r", "late"}, Limit: 1, Window: caddy.Duration(time.Hour)}},
			},
		},
		{
			name: "sentinel",
			input: `frequency_cap {
				redis {
					address         10.0.0.1:26379
					sentinel_master mymaster
					db              2
				}
				dimension r {json.to}
				rule daily {
					by       r
					limit    50
					window   1d
				}
			}`,
			want: &Handler{
				Redis:      &RedisConfig{Config: redisstore.Config{Addresses: []string{"10.0.0.1:26379"}, SentinelMaster: "mymaster", DB: 2}},
				Dimensions: map[string]string{"r": "{json.to}"},
				Rules:      []RuleConfig{{Name: "daily", By: []string{"r"}, Limit: 50, Window: caddy.Duration(24 * time.Hour)}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Handler
			if err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input)); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			g, _ := json.Marshal(&got)
			w, _ := json.Marshal(tc.want)
			if string(g) != string(w) {
				t.Errorf("got  %s\nwant %s", g, w)
			}
		})
	}
}

// TestUnmarshalCaddyfileErrors proves that every configuration mistake is
// refused at load time with a message that names its line.
func TestUnmarshalCaddyfileErrors(t *testing.T) {
	// valid is the tail of a valid block, appended where a case needs one.
	const valid = `
	dimension r {json.to}
	rule ok {
		by     r
		limit  1
		window 1m
	}`
	for _, tc := range []struct {
		name  string
		input string
		want  string // substring of the error
		line  int
	}{
		{"unknown subdirective", "frequency_cap {\n\tfrobnicate yes\n}", `unrecognized subdirective "frobnicate"`, 2},
		{"argument on the directive", "frequency_cap extra {\n}", "wrong argument count", 1},
		{"no rules", "frequency_cap {\n\tdimension r {json.to}\n}", "at least one rule", 3},
		{"name twice", "frequency_cap {\n\tname a\n\tname b" + valid + "\n}", "name already specified", 3},
		{"bad name", "frequency_cap {\n\tname \"my caps\"" + valid + "\n}", `name "my caps"`, 2},
		{"bad redis url", "frequency_cap {\n\tredis http://x:1" + valid + "\n}", `redis url "http://x:1"`, 2},
		{"redis url hides its password", "frequency_cap {\n\tredis redis://:Top/Secret@h:1/0" + valid + "\n}", `redis://<user and password hidden>@h:1/0 does not parse`, 2},
		{"two addresses, neither cluster nor sentinels", "frequency_cap {\n\tredis {\n\t\taddress a:1 b:1\n\t}" + valid + "\n}", "several addresses are a cluster's nodes", 4},
		{"name without value", "frequency_cap {\n\tname" + valid + "\n}", "wrong argument count", 2},
		{"bad on_error", "frequency_cap {\n\ton_error maybe" + valid + "\n}", "on_error must be allow, deny or local", 2},
		{"bad on_missing", "frequency_cap {\n\ton_missing ignore" + valid + "\n}", "on_missing must be reject or skip", 2},
		{"bad refund_on", "frequency_cap {\n\trefund_on 5xx 6xx" + valid + "\n}", `refund_on "6xx"`, 2},
		{"refund_on without value", "frequency_cap {\n\trefund_on" + valid + "\n}", "wrong argument count", 2},
		{"bad max_body", "frequency_cap {\n\tmax_body lots" + valid + "\n}", `max_body "lots"`, 2},
		{"bad status_code", "frequency_cap {\n\tstatus_code 200" + valid + "\n}", `status_code "200"`, 2},
		{"a log no store could keep", "frequency_cap {\n\tdimension r {json.to}\n\trule big {\n\t\tby r\n\t\tlimit 100000\n\t\twindow 100ms\n\t}\n}", "rule big: beside a window under 10s every record is kept, and a limit of 100000 needs up to 200000 in one log, more than the 65535 a log holds: lower the limit to 32767 or less", 3},
		{"a bucketed log no store could keep", "frequency_cap {\n\tdimension r {json.to}\n\trule minute {\n\t\tby r\n\t\tlimit 15\n\t\twindow 1m\n\t}\n\trule tier_day {\n\t\tby r\n\t\tlimit {tier} 50\n\t\tcalendar day\n\t}\n}", "rules minute, tier_day (one log: the same dimensions): a limit over 1000 (or a limit placeholder) merges records into buckets of 10ms", 3},
		{"unknown answer style", "frequency_cap {\n\tanswer gcm" + valid + "\n}", `answer must be apns or expo or fcm or gorush or problem or sendgrid or twilio or webpush, not "gcm"`, 2},
		{"status_code with a provider's style", "frequency_cap {\n\tanswer apns\n\tstatus_code 503" + valid + "\n}", "status_code applies to answer problem only: answer apns denies with its provider's own status", 3},
		{"dry_run with argument", "frequency_cap {\n\tdry_run yes" + valid + "\n}", "wrong argument count", 2},
		{"unknown redis subdirective", "frequency_cap {\n\tredis {\n\t\tnodes a:1\n\t}" + valid + "\n}", `unrecognized redis subdirective "nodes"`, 3},
		{"redis without address", "frequency_cap {\n\tredis {\n\t\ttls\n\t}" + valid + "\n}", "redis needs a URL or an address", 4},
		{"redis address without port", "frequency_cap {\n\tredis {\n\t\taddress redis\n\t}" + valid + "\n}", `redis address "redis" has no port`, 3},
		{"a member of the body beside an array of messages", "frequency_cap {\n\tdimension r {json.*.to}\n\tdimension content {json.body}\n\ton_missing skip content\n\trule same {\n\t\tby r content\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `dimension content: "{json.body}" reads the body's member "body", but the batch dimension's {json.*.to} reads the body as an array of messages (an object as one message), which has no members; read it of each message: {json.*.body}`, 3},
		{"a dimension new at every request", "frequency_cap {\n\tdimension r {json.to}-{http.request.uuid}\n\trule x {\n\t\tby r\n\t\tlimit 5\n\t\twindow 1m\n\t}\n}", `dimension r: "{json.to}-{http.request.uuid}" reads {http.request.uuid}, new at every request`, 2},
		{"a lowered dimension new at every request", "frequency_cap {\n\tdimension r {lower.http.request.uuid}\n\trule x {\n\t\tby r\n\t\tlimit 5\n\t\twindow 1m\n\t}\n}", `dimension r: "{lower.http.request.uuid}" reads {http.request.uuid}, new at every request`, 2},
		{"a lowered time", "frequency_cap {\n\tdimension r {lower.time.now}\n\trule x {\n\t\tby r\n\t\tlimit 5\n\t\twindow 1m\n\t}\n}", `dimension r: "{lower.time.now}" reads {time.now}, new at every request`, 2},
		{"a dimension of the year", "frequency_cap {\n\tdimension r {time.now.year}\n\trule x {\n\t\tby r\n\t\tlimit 5\n\t\twindow 1m\n\t}\n}", `dimension r: "{time.now.year}" reads nothing of the request`, 2},
		{"a dimension of a file", "frequency_cap {\n\tdimension r {file./etc/hostname}\n\trule x {\n\t\tby r\n\t\tlimit 5\n\t\twindow 1m\n\t}\n}", `dimension r: "{file./etc/hostname}" reads nothing of the request`, 2},
		{"a cost above the limit", "frequency_cap {\n\tdimension r {json.to}\n\trule minute {\n\t\tby r\n\t\tlimit 15\n\t\twindow 1m\n\t\tcost 16\n\t}\n}", "rule minute: cost 16 is above its limit 15, so it refuses every send", 3},
		{"redis address with a port out of range", "frequency_cap {\n\tredis {\n\t\taddress 127.0.0.1:99999\n\t}" + valid + "\n}", `redis address "127.0.0.1:99999": the port is not a number from 1 to 65535`, 3},
		{"redis address given as a URL", "frequency_cap {\n\tredis {\n\t\taddress redis://127.0.0.1:6379\n\t}" + valid + "\n}", `redis address "redis://127.0.0.1:6379" is a URL`, 3},
		{"redis bad timeout", "frequency_cap {\n\tredis redis://x:1 {\n\t\ttimeout soon\n\t}" + valid + "\n}", `redis timeout "soon"`, 3},
		{"redis timeout under 1ms", "frequency_cap {\n\tredis redis://x:1 {\n\t\ttimeout 500us\n\t}" + valid + "\n}", "redis timeout 500µs is under 1ms", 3},
		{"redis url and password that differ", "frequency_cap {\n\tredis redis://:one@x:1 {\n\t\tpassword two\n\t}" + valid + "\n}", "the url and password each give a password, and they differ", 4},
		{"redis bad db", "frequency_cap {\n\tredis {\n\t\taddress a:1\n\t\tdb one\n\t}" + valid + "\n}", `redis db "one"`, 4},
		{"redis native_write neither on nor off", "frequency_cap {\n\tredis {\n\t\taddress a:1\n\t\tnative_write no\n\t}" + valid + "\n}", `native_write must be on or off, not "no"`, 4},
		{"redis url and cluster", "frequency_cap {\n\tredis redis://x:1 {\n\t\tcluster\n\t}" + valid + "\n}", "url cannot be combined", 4},
		{"dimension without expression", "frequency_cap {\n\tdimension r" + valid + "\n}", "wrong argument count", 2},
		{"bad dimension name", "frequency_cap {\n\tdimension 9lives {json.to}" + valid + "\n}", `dimension "9lives": invalid name`, 2},
		{"duplicate dimension", "frequency_cap {" + valid + "\n\tdimension r {json.other}\n}", "dimension r already declared", 8},
		{"duplicate rule", "frequency_cap {" + valid + "\n\trule ok {\n\t\tby r\n\t\tlimit 2\n\t\twindow 1h\n\t}\n}", "rule ok already defined", 8},
		{"rule without name", "frequency_cap {\n\tdimension r {json.to}\n\trule {\n\t}\n}", "wrong argument count", 3},
		{"unknown rule subdirective", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tevery 1m\n\t}\n}", `unrecognized rule subdirective "every"`, 4},
		{"unknown dimension", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r channel\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `rule x: unknown dimension "channel"`, 4},
		{"dimension listed twice", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r r\n\t}\n}", "rule x: dimension r listed twice", 4},
		{"bad limit", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit many\n\t}\n}", `rule x: limit "many" is not an integer from 1 to 1099511627776 (2^40)`, 5},
		{"zero limit", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 0\n\t}\n}", `rule x: limit "0" is not an integer from 1 to 1099511627776 (2^40)`, 5},
		{"limit past 2^40", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1099511627777\n\t}\n}", `rule x: limit "1099511627777" is not an integer from 1 to 1099511627776 (2^40)`, 5},
		{"tls_ca without tls", "frequency_cap {\n\tredis {\n\t\taddress a:1\n\t\ttls_ca /etc/ca.pem\n\t}" + valid + "\n}", "redis tls_ca, tls_server_name and tls_insecure_skip_verify need tls (or a rediss:// url)", 5},
		{"on_error local without redis", "frequency_cap {\n\ton_error local 3" + valid + "\n}", "on_error local needs a redis store", 2},
		{"negative limit", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit -3\n\t}\n}", `rule x: limit "-3" is not an integer from 1 to 1099511627776 (2^40)`, 5},
		{"limit twice", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\tlimit 2\n\t}\n}", "rule x: limit already specified", 6},
		{"bad duration", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 5 minutes\n\t}\n}", `rule x: window takes one duration such as 5m or 24h, not "5 minutes"`, 6},
		{"unparsable duration", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 5mins\n\t}\n}", `rule x: window "5mins" is not a duration`, 6},
		{"window too short", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 10us\n\t}\n}", "shorter than 1ms", 6},
		{"window too long", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 400d\n\t}\n}", "longer than", 6},
		{"calendar and window", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t\tcalendar day\n\t}\n}", "rule x: window and calendar exclude each other", 7},
		{"window and calendar", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\tcalendar day\n\t\twindow 1m\n\t}\n}", "rule x: window and calendar exclude each other", 7},
		{"bad calendar unit", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\tcalendar year\n\t}\n}", `unknown calendar unit "year"`, 6},
		{"unknown zone", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\tcalendar day Mars/Olympus\n\t}\n}", `rule x: unknown zone "Mars/Olympus"`, 6},
		{"unknown fallback zone", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\tcalendar day {json.tz} Mars/Olympus\n\t}\n}", `rule x: fallback zone: unknown zone "Mars/Olympus"`, 6},
		{"fallback without placeholder", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\tcalendar day UTC Asia/Tokyo\n\t}\n}", "a fallback zone needs a placeholder zone", 6},
		{"zero cost", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t\tcost 0\n\t}\n}", "rule x: cost 0 counts no send, so the rule caps nothing", 7},
		{"empty exempt value", "frequency_cap {\n\texempt {json.priority} \"\"" + valid + "\n}", `exempt: the value "" matches every request that lacks the placeholder`, 2},
		{"json placeholder without a path", "frequency_cap {\n\tdimension r {json}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", "{json} names no field", 2},
		{"json path with an empty segment", "frequency_cap {\n\tdimension r {json.message..to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `path "message..to": empty segment`, 2},
		{"json path ending in a dot", "frequency_cap {\n\tdimension r {json.to.}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `path "to.": empty segment`, 2},
		{"form field without a name", "frequency_cap {\n\tdimension r {form.}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", "{form.} names no field", 2},
		{"cost path with an empty segment", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t\tcost {json..amount}\n\t}\n}", `rule x: cost: "{json..amount}": path ".amount": empty segment`, 7},
		{"bad cost", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t\tcost -2\n\t}\n}", `rule x: cost "-2"`, 7},
		// A rule without by is one count over every send; a dimension
		// it leaves unused is an error at the dimension's line.
		{"unused dimension beside a rule without by", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", "dimension r is declared but no rule counts by it, so it caps nothing; add it to a rule's by, or remove it", 2},
		{"unused dimension", "frequency_cap {\n\tdimension extra {json.x}" + valid + "\n}", "dimension extra is declared but no rule counts by it", 2},
		// Placeholder mistakes that would make every request look alike.
		{"unclosed placeholder", "frequency_cap {\n\tdimension r {json.message.token\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `dimension r: "{json.message.token" does not close its placeholder "{json.message.token"; write {json.message.token}`, 2},
		{"placeholder opened twice", "frequency_cap {\n\tdimension r {json.to{json.cc}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `opens a placeholder at "{json.cc}" before closing the one at "{json.to"; write {json.to}`, 2},
		{"brace never opened", "frequency_cap {\n\tdimension r json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `closes a placeholder it never opened`, 2},
		{"empty placeholder", "frequency_cap {\n\tdimension r x-{}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `has an empty placeholder {}`, 2},
		{"unclosed alternative", "frequency_cap {\n\tdimension r {json.to} {json.cc\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `does not close its placeholder "{json.cc"`, 2},
		{"constant dimension", "frequency_cap {\n\tdimension r everyone\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `dimension r: "everyone" reads nothing of the request, so every send would share one count; name a request placeholder such as {json.to} or {http.request.header.X-User}, or, for one count over every send, write a rule without by`, 2},
		{"dimension from the environment", "frequency_cap {\n\tdimension r {env.HOSTNAME}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", "reads nothing of the request", 2},
		{"reserved dimension name", "frequency_cap {\n\tdimension _every_send {json.to}\n\trule x {\n\t\tby _every_send\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", "the name is reserved for rules without by", 2},
		{"unclosed cost", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t\tcost {json.amount\n\t}\n}", `rule x: cost: "{json.amount" does not close its placeholder`, 7},
		{"unclosed limit", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit {tier 5\n\t\twindow 1m\n\t}\n}", `rule x: limit: "{tier" does not close its placeholder`, 5},
		{"unclosed exempt", "frequency_cap {\n\texempt {json.priority otp" + valid + "\n}", `exempt: "{json.priority" does not close its placeholder`, 2},
		{"missing limit", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\twindow 1m\n\t}\n}", "rule x: needs limit", 3},
		{"missing window", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t}\n}", "rule x: needs window <duration> or calendar", 3},
		// Sending policy.
		{"policy: quiet bad range", "frequency_cap {\n\trule q {\n\t\tquiet 21:00-8:00\n\t}\n}", `rule q: quiet range "21:00-8:00": "8:00" is not HH:MM`, 3},
		{"policy: quiet out of range", "frequency_cap {\n\trule q {\n\t\tquiet 21:00-24:30\n\t}\n}", `"24:30" is not a time from 00:00 to 23:59`, 3},
		{"policy: quiet empty range", "frequency_cap {\n\trule q {\n\t\tquiet 08:00-08:00\n\t}\n}", "is empty", 3},
		{"policy: quiet unknown zone", "frequency_cap {\n\trule q {\n\t\tquiet 21:00-08:00 Mars/Olympus\n\t}\n}", `rule q: unknown zone "Mars/Olympus"`, 3},
		{"policy: unknown day", "frequency_cap {\n\trule q {\n\t\tquiet 21:00-08:00\n\t\tdays mon-fro\n\t}\n}", `rule q: unknown day "fro"`, 4},
		{"policy: days without quiet", "frequency_cap {\n\tdimension r {json.to}\n\trule q {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t\tdays sat\n\t}\n}", "rule q: days needs quiet", 3},
		{"policy: quiet then limit", "frequency_cap {\n\trule q {\n\t\tquiet 21:00-08:00\n\t\tlimit 5\n\t}\n}", "rule q: quiet excludes limit, window, calendar and cost", 4},
		{"policy: window then quiet", "frequency_cap {\n\trule q {\n\t\twindow 1m\n\t\tquiet 21:00-08:00\n\t}\n}", "rule q: quiet excludes limit, window, calendar and cost", 4},
		{"policy: quiet then calendar", "frequency_cap {\n\trule q {\n\t\tquiet 21:00-08:00\n\t\tcalendar day\n\t}\n}", "rule q: quiet excludes", 4},
		{"policy: divisor zero", "frequency_cap {\n\ton_error local 0" + valid + "\n}", `on_error local divisor "0" is not an integer of at least 1`, 2},
		{"policy: divisor not a number", "frequency_cap {\n\ton_error local three" + valid + "\n}", `on_error local divisor "three"`, 2},
		{"policy: divisor on deny", "frequency_cap {\n\ton_error deny 3" + valid + "\n}", "wrong argument count", 2},
		{"skip without value", "frequency_cap {\n\tskip {json.validate_only}" + valid + "\n}", "skip needs a placeholder and at least one value", 2},
		{"skip not a placeholder", "frequency_cap {\n\tskip validate_only true" + valid + "\n}", `skip "validate_only" is not a placeholder`, 2},
		{"an empty key_prefix", "frequency_cap {\n\tkey_prefix \"\"" + valid + "\n}", `key_prefix "" is empty, which means the default "freqcap:"`, 2},
		{"skip with a space after its placeholder", "frequency_cap {\n\tskip \"{json.v} \" true" + valid + "\n}", `skip "{json.v} " has white space around its placeholder, so only values carrying it too would match; write "{json.v}"`, 2},
		{"skip on a wildcard path", "frequency_cap {\n\tskip {json.*.validate_only} true" + valid + "\n}", `skip "{json.*.validate_only}" reads a wildcard path`, 2},
		{"skip empty value", "frequency_cap {\n\tskip {json.validate_only} \"\"" + valid + "\n}", `skip: the value "" matches every request that lacks the placeholder`, 2},
		{"policy: exempt without value", "frequency_cap {\n\texempt {json.priority}" + valid + "\n}", "exempt needs a placeholder and at least one value", 2},
		{"policy: exempt not a placeholder", "frequency_cap {\n\texempt priority otp" + valid + "\n}", `exempt "priority" is not a placeholder`, 2},
		{"policy: limit fallback not a number", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit {tier} lots\n\t}\n}", `rule x: limit "lots" is not an integer from 1 to 1099511627776 (2^40)`, 5},
		{"policy: limit fallback without placeholder", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 5 6\n\t}\n}", "wrong argument count", 5},
		{"policy: rule dry_run with argument", "frequency_cap {\n\tdimension r {json.to}\n\trule x {\n\t\tdry_run yes\n\t}\n}", "wrong argument count", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if line := ", at Testfile:" + strconv.Itoa(tc.line); !strings.HasSuffix(err.Error(), line) {
				t.Errorf("error %q does not name line %d", err, tc.line)
			}
		})
	}
}
