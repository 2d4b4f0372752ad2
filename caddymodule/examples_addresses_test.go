package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// Every field a provider reads as an address is capped, through each of
// its forms and across them, or passed by the example's documented
// choice; every other valid shape of a request passes rather than
// getting a 400. The examples run as shipped (only their ports changed).

// TestGorushAddresses runs examples/gorush-gateway: a device token is one
// address whether it comes in tokens or in to (gorush appends to to the
// tokens), an Android or Huawei topic and each topic of a condition are
// addresses, an iOS topic (the app's bundle id) is none; data-only pushes,
// iOS alert objects, "tokens": null and Go's zero values pass.
func TestGorushAddresses(t *testing.T) {
	up := startGorush(t)
	g := startExample(t, "../examples/gorush-gateway/Caddyfile", up)
	// push sends one notification and reports whether it reached gorush
	// (an all-capped push is answered by the gateway alone).
	push := func(notification string) bool {
		t.Helper()
		before := len(up.received())
		a := g.post("/api/push", "application/json", `{"notifications":[`+notification+`]}`)
		expectStatus(t, a, http.StatusOK)
		return len(up.received()) > before
	}
	n := func(fields string, args ...any) string { return fmt.Sprintf("{"+fields+"}", args...) }

	t.Run("tokens then to", func(t *testing.T) {
		tok := unique("tok")
		if !push(n(`"tokens":[%q],"platform":2,"message":"m"`, tok)) {
			t.Fatal("the first push was capped")
		}
		// The same message to the same token through to: same_message_10m.
		if push(n(`"tokens":[],"to":%q,"platform":2,"message":"m"`, tok)) {
			t.Error("the repeat through to was not capped")
		}
		if push(n(`"tokens":null,"to":%q,"platform":2,"message":"m"`, tok)) {
			t.Error("the repeat through to, tokens null, was not capped")
		}
		// 9 more through tokens (10 a minute), then one through to.
		for i := range 9 {
			if !push(n(`"tokens":[%q],"platform":2,"message":"n%d"`, tok, i)) {
				t.Fatalf("push %d capped", i+2)
			}
		}
		if push(n(`"to":%q,"platform":1,"message":"eleventh"`, tok)) {
			t.Error("the 11th push in a minute, through to, was not capped")
		}
	})

	t.Run("to then tokens, and a capped to leaves its tokens", func(t *testing.T) {
		tok, other := unique("to"), unique("other")
		if !push(n(`"to":%q,"platform":2,"message":"m"`, tok)) {
			t.Fatal("the first push was capped")
		}
		if push(n(`"tokens":[%q],"platform":2,"message":"m"`, tok)) {
			t.Error("the repeat through tokens was not capped")
		}
		a := g.post("/api/push", "application/json", fmt.Sprintf(`{"notifications":[{"tokens":[%q],"to":%q,"platform":2,"message":"m"}]}`, other, tok))
		expectStatus(t, a, http.StatusOK)
		if got := dropped(t, a); !slices.Equal(got, []string{"notifications.0.to"}) {
			t.Errorf("dropped %v, want notifications.0.to", got)
		}
		bodies := up.received()
		if want := fmt.Sprintf(`{"notifications":[{"tokens":[%q],"platform":2,"message":"m"}]}`, other); string(bodies[len(bodies)-1]) != want {
			t.Errorf("gorush got %s, want %s", bodies[len(bodies)-1], want)
		}
	})

	t.Run("Android and Huawei topics and conditions, not iOS topics", func(t *testing.T) {
		news, a, b := unique("news"), unique("a"), unique("b")
		for _, platform := range []int{2, 3} {
			topic := fmt.Sprint(news, platform)
			if !push(n(`"platform":%d,"topic":%q,"message":"m"`, platform, topic)) {
				t.Fatalf("platform %d: the first topic push was capped", platform)
			}
			if push(n(`"platform":%d,"topic":%q,"message":"m","tokens":[]`, platform, topic)) {
				t.Errorf("platform %d: the repeated topic push was not capped", platform)
			}
		}
		if !push(n(`"platform":2,"condition":"'%s' in topics && '%s' in topics","message":"m"`, a, b)) {
			t.Fatal("the first condition was capped")
		}
		// Respelled: other quotes, spaces, order and parentheses.
		if push(n(`"platform":2,"condition":"(\"%s\" in topics)&&('%s'  in topics)","message":"m"`, b, a)) {
			t.Error("the respelled condition was not capped")
		}
		// The Admin SDKs strip a topic's "/topics/" prefix: one topic.
		slash := unique("slash")
		if !push(n(`"platform":2,"topic":"/topics/%s","message":"m"`, slash)) {
			t.Fatal("the first prefixed topic was capped")
		}
		if push(n(`"platform":2,"topic":%q,"message":"m"`, slash)) {
			t.Error("the bare topic after the prefixed one was not capped")
		}
		// One of its topics alone, as a condition and as a topic.
		if push(n(`"platform":2,"condition":"'%s' in topics && !('%s' in topics)","message":"m"`, b, unique("spared"))) {
			t.Error("a condition naming one capped topic was not capped")
		}
		if push(n(`"platform":2,"topic":%q,"message":"m"`, a)) {
			t.Error("a topic capped through a condition passed as a topic")
		}
		// gorush sends an Android topic push to its tokens too: both count.
		both, tok := unique("both"), unique("both-tok")
		if !push(n(`"platform":2,"topic":%q,"tokens":[%q],"message":"m"`, both, tok)) {
			t.Fatal("a topic push with a token was capped")
		}
		if push(n(`"platform":2,"tokens":[%q],"message":"m"`, tok)) {
			t.Error("the token of a topic push was not counted")
		}
		// iOS: the topic is the bundle id, the same for every push.
		bundle := unique("com.example.app")
		for i := range 3 {
			if !push(n(`"platform":1,"topic":%q,"tokens":[%q],"message":"m"`, bundle, unique(fmt.Sprint("ios", i)))) {
				t.Errorf("iOS push %d with the app's topic was capped", i)
			}
		}
	})

	t.Run("other valid shapes pass", func(t *testing.T) {
		for _, body := range []string{
			n(`"tokens":[%q],"platform":2,"data":{"k":"v","n":1}`, unique("data")),
			n(`"tokens":[%q],"platform":1,"alert":{"title":"t","body":"b","loc-args":["x"]}`, unique("alert")),
			n(`"tokens":null,"to":%q,"platform":2,"message":"x"`, unique("null")),
			n(`"tokens":[%q],"to":"","topic":"","condition":"","platform":2,"message":"","title":"","data":null,"badge":0,"content_available":false`, unique("zero")),
			n(`"tokens":[%q],"platform":2,"notification":{"title":"t","body":"b"},"message":"x"`, unique("notif")),
		} {
			a := g.post("/api/push", "application/json", `{"notifications":[`+body+`]}`)
			if a.status != http.StatusOK {
				t.Errorf("%s: %d %s", body, a.status, a.body)
			}
		}
	})

	t.Run("bad requests get a reason", func(t *testing.T) {
		for body, want := range map[string]string{
			n(`"platform":2,"condition":"'a' in topics &","message":"m"`): "topic condition",
			n(`"platform":2,"topic":"two words","message":"m"`):           "is not a topic name",
			n(`"platform":2,"message":"m"`):                               "missing value for dimension token",
			n(`"platform":1,"topic":"com.example.app","message":"m"`):     "missing value for dimension token",
			// gorush's JSON reads names without regard to case: an iOS
			// platform spelt Platform would leave its topic uncapped.
			n(`"platform":2,"Platform":1,"topic":"x","message":"m"`): `names \"Platform\" where \"platform\" is read`,
			n(`"platform":2,"To":"x","message":"m"`):                 `names \"To\" where \"to\" is read`,
		} {
			a := g.post("/api/push", "application/json", `{"notifications":[`+body+`]}`)
			if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), want) {
				t.Errorf("%s: %d %s, want 400 with %q", body, a.status, a.body, want)
			}
		}
	})
}

// TestFCMAddresses runs examples/fcm-gateway: a topic is its own audience
// (4 an hour), whether named by topic or in a condition, however the
// condition is spelt; a malformed condition is INVALID_ARGUMENT; a
// data-only message and Go's zero values pass; a message the per-
// recipient rules refuse gives its topic's quota back.
func TestFCMAddresses(t *testing.T) {
	up := startUpstream(t)
	g := startExample(t, "../examples/fcm-gateway/Caddyfile", up)
	const send = "/v1/projects/demo/messages:send"
	msg := func(fields string, args ...any) string {
		return fmt.Sprintf(`{"message":{`+fields+`}}`, args...)
	}
	status := func(body string) int {
		t.Helper()
		return g.post(send, "application/json", body).status
	}

	t.Run("topic", func(t *testing.T) {
		topic := unique("news")
		for i := range 4 {
			if s := status(msg(`"topic":%q,"notification":{"body":"b%d"}`, topic, i)); s != http.StatusOK {
				t.Fatalf("topic message %d: %d", i+1, s)
			}
		}
		a := g.post(send, "application/json", msg(`"topic":%q,"notification":{"body":"fifth"}`, topic))
		expectStatus(t, a, http.StatusTooManyRequests)
		if !strings.Contains(string(a.body), `"errorCode":"QUOTA_EXCEEDED"`) {
			t.Errorf("the fifth: %s", a.body)
		}
		// Prefixed as the Admin SDKs accept it, or through a condition:
		// the same topic, still capped.
		if s := status(msg(`"topic":"/topics/%s","data":{"k":"v"}`, topic)); s != http.StatusTooManyRequests {
			t.Errorf("the topic with its /topics/ prefix: %d", s)
		}
		if s := status(msg(`"condition":"'%s' in topics","data":{"k":"v"}`, topic)); s != http.StatusTooManyRequests {
			t.Errorf("the topic through a condition: %d", s)
		}
	})

	t.Run("condition", func(t *testing.T) {
		x, y := unique("x"), unique("y")
		spellings := []string{
			`'%[1]s' in topics && '%[2]s' in topics`,
			`'%[2]s' in topics&&'%[1]s' in topics`,
			`(\"%[1]s\" in topics) && (\"%[2]s\" in topics)`,
			`  '%[1]s'  in  topics  &&  ( '%[2]s' in topics || '%[2]s' in topics )  `,
		}
		for i, s := range spellings {
			if got := status(msg(`"condition":"`+s+`","notification":{"body":"c%d"}`, x, y, i)); got != http.StatusOK {
				t.Fatalf("condition %d: %d", i+1, got)
			}
		}
		if got := status(msg(`"condition":"!('%[2]s' in topics) || '%[1]s' in topics","notification":{"body":"c5"}`, x, y)); got != http.StatusTooManyRequests {
			t.Errorf("a fifth message to the same topics: %d", got)
		}
		if got := status(msg(`"topic":%q,"notification":{"body":"c6"}`, y)); got != http.StatusTooManyRequests {
			t.Errorf("a topic named in four conditions: %d", got)
		}
		if up.count() == 0 {
			t.Error("FCM got nothing")
		}
	})

	// A condition that holds outside its topics reaches every other
	// topic's subscribers: with a new made-up topic each time it was an
	// uncapped broadcast. Every such condition counts as the one
	// audience "*", under its 4 an hour.
	t.Run("negated conditions are one audience", func(t *testing.T) {
		for i := range 4 {
			cond := fmt.Sprintf(`!('%s' in topics)`, unique("ghost"))
			if i%2 == 1 {
				cond = fmt.Sprintf(`'%s' in topics || !('%s' in topics && '%s' in topics)`, unique("a"), unique("b"), unique("c"))
			}
			if s := status(msg(`"condition":%q,"notification":{"body":"sale %d"}`, cond, i)); s != http.StatusOK {
				t.Fatalf("open condition %d: %d", i+1, s)
			}
		}
		a := g.post(send, "application/json", msg(`"condition":"!('%s' in topics)","notification":{"body":"sale 5"}`, unique("ghost")))
		expectStatus(t, a, http.StatusTooManyRequests)
		if !strings.Contains(string(a.body), "topic_hour") {
			t.Errorf("the fifth open condition: %s", a.body)
		}
		// A condition that spares everyone outside its topics is still
		// only its topics' audience.
		if s := status(msg(`"condition":"'%s' in topics && !('%s' in topics)","notification":{"body":"closed"}`, unique("a"), unique("b"))); s != http.StatusOK {
			t.Errorf("a closed condition after four open ones: %d", s)
		}
	})

	// Two cap sets admit a topic message: its quota fields list both
	// sets' rules. They listed the second set's alone, so the answer to
	// the fourth message said quota was left, and the fifth was refused.
	t.Run("quota fields of both cap sets", func(t *testing.T) {
		topic := unique("both-sets")
		var a *answer
		for i := range 4 {
			a = g.post(send, "application/json", msg(`"topic":%q,"notification":{"body":"q%d"}`, topic, i))
			expectStatus(t, a, http.StatusOK)
		}
		rl := a.header.Get("RateLimit")
		if !strings.Contains(rl, `"topic_hour";r=0;`) || !strings.Contains(rl, `"token_minute";r=11;`) {
			t.Errorf("RateLimit of the fourth message: %q", rl)
		}
		if p := a.header.Get("RateLimit-Policy"); !strings.HasPrefix(p, `"topic_hour";q=4;w=3600, "token_minute";q=15;w=60`) {
			t.Errorf("RateLimit-Policy of the fourth message: %q", p)
		}
		if got := a.header.Get("X-RateLimit-Remaining"); got != "0" {
			t.Errorf("X-RateLimit-Remaining of the fourth message: %q, want 0 (topic_hour)", got)
		}
		a = g.post(send, "application/json", msg(`"topic":%q,"notification":{"body":"q5"}`, topic))
		expectStatus(t, a, http.StatusTooManyRequests)
		if rl := a.header.Get("RateLimit"); !strings.HasPrefix(rl, `"topic_hour";r=0;`) || strings.Contains(rl, "token_minute") {
			t.Errorf("RateLimit of the refused fifth: %q, want topic_hour's alone", rl)
		}
	})

	t.Run("a refused message gives its topic back", func(t *testing.T) {
		topic := unique("refund")
		for range 2 {
			if s := status(msg(`"topic":%q,"notification":{"body":"same"}`, topic)); s != http.StatusOK {
				t.Fatalf("%d", s)
			}
		}
		// The third same body is refused by same_body_59s (the fcm cap
		// set): topic_hour gets its quota back, so two more pass.
		if s := status(msg(`"topic":%q,"notification":{"body":"same"}`, topic)); s != http.StatusTooManyRequests {
			t.Fatalf("the third same body: %d", s)
		}
		for i := range 2 {
			if s := status(msg(`"topic":%q,"notification":{"body":"other%d"}`, topic, i)); s != http.StatusOK {
				t.Errorf("message %d after the refund: %d", i+4, s)
			}
		}
		if s := status(msg(`"topic":%q,"notification":{"body":"sixth"}`, topic)); s != http.StatusTooManyRequests {
			t.Errorf("the fifth counted message: %d", s)
		}
	})

	t.Run("other valid shapes pass", func(t *testing.T) {
		for _, body := range []string{
			msg(`"token":%q,"data":{"k":"v"}`, unique("data")),
			msg(`"token":%q,"topic":"","condition":"","notification":{"body":"x"}`, unique("zero")),
			msg(`"token":%q,"notification":{"title":"only a title"},"android":{"priority":"high"}`, unique("title")),
			msg(`"topic":%q,"apns":{"payload":{"aps":{"content-available":1}}}`, unique("silent")),
		} {
			if s := status(body); s != http.StatusOK {
				t.Errorf("%s: %d", body, s)
			}
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for body, want := range map[string]string{
			msg(`"condition":"'a' in topics ||","notification":{"body":"x"}`): "topic condition",
			msg(`"condition":"a in topics"`):                                  "topic condition",
			msg(`"condition":7`):                                              "reads a string",
			msg(`"topic":"a/b"`):                                              "is not a topic name",
			msg(`"notification":{"body":"x"}`):                                "recipient",
		} {
			a := g.post(send, "application/json", body)
			if a.status != http.StatusBadRequest || !strings.Contains(string(a.body), `"status":"INVALID_ARGUMENT"`) || !strings.Contains(string(a.body), want) {
				t.Errorf("%s: %d %s, want INVALID_ARGUMENT naming %q", body, a.status, a.body, want)
			}
		}
	})
}

// TestExpoAddresses runs examples/expo-push: a recipient is one address
// whether "to" is a string or an array: 15 through one form, the 16th
// through the other is dropped, and through the path with a trailing
// slash too.
func TestExpoAddresses(t *testing.T) {
	up := startUpstream(t)
	g := startExample(t, "../examples/expo-push/Caddyfile", up)
	const send = "/--/api/v2/push/send"
	r := unique("ExponentPushToken[r]")
	for i := range 15 {
		var to any = r
		if i%2 == 1 {
			to = []string{r}
		}
		body, _ := json.Marshal([]map[string]any{{"to": to, "body": fmt.Sprint("b", i)}})
		expectStatus(t, g.post(send, "application/json", string(body)), http.StatusOK)
	}
	n := up.count()
	for _, to := range []any{[]string{r}, r} {
		body, _ := json.Marshal(map[string]any{"to": to, "body": "sixteenth"})
		a := g.post(send, "application/json", string(body))
		if up.count() != n || !strings.Contains(string(a.body), "MessageRateExceeded") {
			t.Errorf("the 16th through %T reached Expo: %d %s", to, a.status, a.body)
		}
	}
	// The send path with a trailing slash, which a router that ignores
	// one serves as the send, is capped too: it passed uncapped.
	body, _ := json.Marshal(map[string]any{"to": r, "body": "slash"})
	a := g.post(send+"/", "application/json", string(body))
	if up.count() != n || !strings.Contains(string(a.body), "MessageRateExceeded") {
		t.Errorf("the 16th to %s/ reached Expo: %d %s", send, a.status, a.body)
	}
}
