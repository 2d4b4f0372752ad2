package conformance

import (
	"net/http"
	"strings"
	"sync"
)

// WebPushPrefix is the path under which the WebPush mock takes push
// messages: a subscription's endpoint is <origin>/push/send/<subscription id>,
// so the id is Caddy's {http.request.uri.path.2}.
const WebPushPrefix = "/push/send/"

// WebPush is a mock push service (RFC 8030) as a browser vendor's answers a
// valid push: POST <endpoint> with a TTL header, VAPID authorization (RFC
// 8292: "Authorization: vapid t=<jwt>, k=<key>") and an encrypted payload
// (Content-Encoding: aes128gcm, RFC 8291) or none, gets 201 Created with a
// Location (the push message resource) and the TTL it keeps the message.
// A push without TTL gets 400, without VAPID credentials 401, to a path
// outside WebPushPrefix 404 (an unknown subscription).
type WebPush struct {
	Recorder

	mu     sync.Mutex
	pushes []string
}

// Pushes returns the subscription id of every accepted push, in order.
func (p *WebPush) Pushes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.pushes...)
}

// Count returns how many pushes each subscription got.
func (p *WebPush) Count() map[string]int {
	n := map[string]int{}
	for _, s := range p.Pushes() {
		n[s]++
	}
	return n
}

func (p *WebPush) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := p.read(r)
	id, ok := strings.CutPrefix(r.URL.Path, WebPushPrefix)
	if !ok || id == "" || strings.Contains(id, "/") || r.Method != http.MethodPost {
		http.Error(w, "no such subscription", http.StatusNotFound)
		return
	}
	if r.Header.Get("TTL") == "" {
		http.Error(w, "TTL header required", http.StatusBadRequest)
		return
	}
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(strings.ToLower(auth), "vapid ") || !strings.Contains(auth, "t=") || !strings.Contains(auth, "k=") {
		http.Error(w, "VAPID authorization required", http.StatusUnauthorized)
		return
	}
	if len(got.Body) > 0 && !strings.EqualFold(got.ContentEncoding(), "aes128gcm") {
		http.Error(w, "payload must be aes128gcm", http.StatusUnsupportedMediaType)
		return
	}
	p.mu.Lock()
	p.pushes = append(p.pushes, id)
	p.mu.Unlock()
	w.Header().Set("Location", "/push/message/"+UUID())
	w.Header().Set("TTL", r.Header.Get("TTL"))
	w.WriteHeader(http.StatusCreated)
}
