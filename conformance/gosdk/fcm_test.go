package gosdk_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	firebase "firebase.google.com/go/v4"
	"firebase.google.com/go/v4/errorutils"
	"firebase.google.com/go/v4/messaging"
	"golang.org/x/oauth2"
	"google.golang.org/api/option"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// fcmSite is an FCM HTTP v1 gateway: each registration token
// ({json.message.token}) is capped at 2 a minute, refused as FCM refuses a
// sender over quota: 429 RESOURCE_EXHAUSTED with an FcmError detail
// QUOTA_EXCEEDED.
const fcmSite = `http://127.0.0.1:%d {
	frequency_cap /v1/projects/*/messages:send {
		name fcm
		answer fcm
		dimension recipient {json.message.token}
		rule recipient_minute {
			by recipient
			limit 2
			window 1m
		}
	}
	reverse_proxy %s
}
`

const fcmProject = "conformance-demo"

// TestFCMSDK proves, with firebase.google.com/go/v4's messaging client
// pointed at the gateway (option.WithEndpoint: the SDK uses the endpoint
// its transport returns instead of https://fcm.googleapis.com/v1) with a
// fake OAuth token (no Google credentials; option.WithHTTPClient with an
// oauth2.Transport that also counts the requests), that Send returns the
// message name from FCM while the token is under the cap, and that a
// capped Send returns an error for which messaging.IsQuotaExceeded and
// errorutils.IsResourceExhausted are true, with the HTTP response's 429 in
// errorutils.HTTPResponse; and that SendEach of 15 messages to 5 tokens
// (3 each, sent concurrently by the SDK) returns a BatchResponse with
// exactly 2 successes and 1 such per-message error for each token, in
// the messages' order. No 429 is retried (the SDK retries 503 only): one
// HTTP request per message.
// The mock FCM gets exactly the admitted messages.
func TestFCMSDK(t *testing.T) {
	ctx := context.Background()
	mock := &conformance.FCM{}
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(fcmSite, port, upstream))
	defer gw.Healthy(t)

	// The HTTP client: a fake OAuth token on a transport that counts the
	// requests the SDK makes and their answers.
	wire := &countingTransport{base: http.DefaultTransport}
	hc := &http.Client{Transport: &oauth2.Transport{
		Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "conformance-fake-token", TokenType: "Bearer"}),
		Base:   wire,
	}}
	app, err := firebase.NewApp(ctx, &firebase.Config{ProjectID: fcmProject},
		option.WithEndpoint(fmt.Sprintf("http://127.0.0.1:%d/v1", port)),
		option.WithHTTPClient(hc),
	)
	if err != nil {
		t.Fatal(err)
	}
	client, err := app.Messaging(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg := func(tok string, i int) *messaging.Message {
		return &messaging.Message{
			Token:        tok,
			Notification: &messaging.Notification{Title: "hello", Body: fmt.Sprintf("message %d", i)},
		}
	}
	quotaExceeded := func(err error) string {
		var why []string
		if !messaging.IsQuotaExceeded(err) {
			why = append(why, "messaging.IsQuotaExceeded is false")
		}
		if !errorutils.IsResourceExhausted(err) {
			why = append(why, "errorutils.IsResourceExhausted is false")
		}
		if res := errorutils.HTTPResponse(err); res == nil || res.StatusCode != http.StatusTooManyRequests {
			why = append(why, "the HTTP response is not a 429")
		}
		return strings.Join(why, ", ")
	}
	before := mock.Len()

	t.Run("Send", func(t *testing.T) {
		const tok = "token-send"
		for i, wantCapped := range []bool{false, false, true} {
			name, err := client.Send(ctx, msg(tok, i))
			if !wantCapped {
				if err != nil || !strings.HasPrefix(name, "projects/"+fcmProject+"/messages/") {
					t.Errorf("send %d: %q, %v; want the message name", i+1, name, err)
				}
				continue
			}
			t.Logf("send %d (capped): %q, %v", i+1, name, err)
			if err == nil {
				t.Errorf("send %d (capped): no error, name %q", i+1, name)
			} else if why := quotaExceeded(err); why != "" {
				t.Errorf("send %d (capped): %v: %s", i+1, err, why)
			}
		}
		if got := mock.Count()[tok]; got != 2 {
			t.Errorf("the mock FCM got %d messages for %s, want 2", got, tok)
		}
		if got := wire.take(); got[200] != 2 || got[429] != 1 || len(got) != 2 {
			t.Errorf("the SDK's requests were answered %v, want 200: 2, 429: 1 (no retry)", got)
		}
	})

	t.Run("SendEach", func(t *testing.T) {
		var msgs []*messaging.Message
		for i := 0; i < 15; i++ {
			msgs = append(msgs, msg(fmt.Sprintf("token-each-%d", i%5), i))
		}
		br, err := client.SendEach(ctx, msgs)
		if err != nil {
			t.Fatalf("SendEach: %v", err)
		}
		if len(br.Responses) != len(msgs) {
			t.Fatalf("SendEach: %d responses for %d messages", len(br.Responses), len(msgs))
		}
		if br.SuccessCount != 10 || br.FailureCount != 5 {
			t.Errorf("SendEach: %d successes and %d failures, want 10 and 5", br.SuccessCount, br.FailureCount)
		}
		ok, capped := map[string]int{}, map[string]int{}
		for i, r := range br.Responses {
			tok := msgs[i].Token
			if r.Success {
				if !strings.HasPrefix(r.MessageID, "projects/"+fcmProject+"/messages/") {
					t.Errorf("message %d: success with id %q", i, r.MessageID)
				}
				ok[tok]++
				continue
			}
			if why := quotaExceeded(r.Error); why != "" {
				t.Errorf("message %d (to %s): %v: %s", i, tok, r.Error, why)
				continue
			}
			capped[tok]++
		}
		for i := 0; i < 5; i++ {
			tok := fmt.Sprintf("token-each-%d", i)
			if ok[tok] != 2 || capped[tok] != 1 {
				t.Errorf("%s: %d sent, %d capped, want 2 and 1", tok, ok[tok], capped[tok])
			}
			if got := mock.Count()[tok]; got != 2 {
				t.Errorf("the mock FCM got %d messages for %s, want 2", got, tok)
			}
		}
		if got := wire.take(); got[200] != 10 || got[429] != 5 || len(got) != 2 {
			t.Errorf("the SDK's requests were answered %v, want 200: 10, 429: 5 (no retry)", got)
		}
	})

	// Every request that reached the mock was an admitted message: 2 from
	// Send and 10 from SendEach.
	if n := mock.Len() - before; n != 12 {
		t.Errorf("the mock FCM got %d requests, want 12", n)
	}
}

// countingTransport counts the answers to the requests through it, by
// status code.
type countingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	seen map[int]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := c.base.RoundTrip(r)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[int]int{}
	}
	if err != nil {
		c.seen[0]++
	} else {
		c.seen[res.StatusCode]++
	}
	return res, err
}

// take returns the counts so far and starts again.
func (c *countingTransport) take() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := c.seen
	c.seen = nil
	return seen
}
