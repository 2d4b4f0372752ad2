package conformance

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/freqcap/caddy-freqcap/conformance/gorush"
)

// GorushPushPath is gorush's push endpoint (its default api.push_uri).
const GorushPushPath = "/api/push"

// Gorush is a mock of gorush (github.com/appleboy/gorush) as its
// router/server.go pushHandler answers POST /api/push: the body bound
// into its RequestPush (gin binds JSON whatever the Content-Type), 400
// {"code":400,"message":"Missing notifications field."} when that fails
// or notifications is missing (binding:"required"), 400 "Notifications
// field is empty." for no notification,
// and otherwise 200 {"counts","logs","success":"ok"} with gin's
// Content-Type: counts is every token of every notification, plus one for
// a topic, delivered or not (handleNotification). In Sync mode (gorush's
// core.sync) logs holds a failed-push LogPushEntry for each token the
// provider refused, here each token starting with "bad" (error
// "BadDeviceToken"); otherwise logs is empty, as gorush answers before
// sending. Other paths are gin's 404.
type Gorush struct {
	Recorder
	Sync bool

	mu     sync.Mutex
	pushes []gorush.RequestPush
}

// Pushes returns every push gorush accepted, in order.
func (g *Gorush) Pushes() []gorush.RequestPush {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gorush.RequestPush(nil), g.pushes...)
}

// Tokens returns every token of every push accepted, in order.
func (g *Gorush) Tokens() []string {
	var out []string
	for _, p := range g.Pushes() {
		for _, n := range p.Notifications {
			out = append(out, n.Tokens...)
		}
	}
	return out
}

func (g *Gorush) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := g.read(r)
	if r.URL.Path != GorushPushPath || r.Method != http.MethodPost {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte("404 page not found"))
		return
	}
	var form gorush.RequestPush
	if got.DecodeErr != nil || json.Unmarshal(got.Decoded, &form) != nil || form.Notifications == nil {
		gorushJSON(w, http.StatusBadRequest, gorush.ErrorResponse{Code: http.StatusBadRequest, Message: "Missing notifications field."})
		return
	}
	if len(form.Notifications) == 0 {
		gorushJSON(w, http.StatusBadRequest, gorush.ErrorResponse{Code: http.StatusBadRequest, Message: "Notifications field is empty."})
		return
	}
	g.mu.Lock()
	g.pushes = append(g.pushes, form)
	g.mu.Unlock()
	answer := gorush.Response{Logs: make([]gorush.LogPushEntry, 0), Success: "ok"}
	for _, n := range form.Notifications {
		answer.Counts += len(n.Tokens)
		if n.Topic != "" {
			answer.Counts++
		}
		if !g.Sync {
			continue
		}
		for _, tok := range n.Tokens {
			if strings.HasPrefix(tok, "bad") {
				answer.Logs = append(answer.Logs, gorush.LogPushEntry{
					ID: n.ID, Type: gorush.FailedPush, Platform: gorush.PlatformName(n.Platform),
					Token: tok, Message: n.Message, Error: "BadDeviceToken",
				})
			}
		}
	}
	gorushJSON(w, http.StatusOK, answer)
}

// gorushJSON writes v as gin's c.JSON does.
func gorushJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b)
}
