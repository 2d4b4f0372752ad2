package answer

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// gorush (github.com/appleboy/gorush, MIT licence, Copyright (c) 2016
// Bo-Yi Wu) has no rate-limit error: a token it cannot deliver is a
// "failed-push" entry of the logs in its 200 answer to POST /api/push.
// What is copied from its source, and from where:
//
//   - router/server.go, pushHandler: the answer is
//     c.JSON(200, gin.H{"success": "ok", "counts": counts, "logs": logs}),
//     which gin writes with the keys sorted, Content-Type
//     "application/json; charset=utf-8"; its own errors are
//     abortWithError, {"code": <HTTP status>, "message": ...}, as it
//     answers a body it cannot bind (400 "Missing notifications field.").
//   - router/server.go, handleNotification: counts is the number of
//     tokens of every notification handed on (plus one for a topic),
//     delivered or not, so a failed token counts; logs is made empty
//     (never null) and holds entries only in sync mode, where
//     notify/notification_*.go append one per failed token (a
//     delivered token is logged, not answered).
//   - logx/log.go, LogPushEntry (the type below, its fields and JSON
//     names as they are there) and GetLogPushEntry: type is the status,
//     platform the name typeForPlatForm gives the notification's
//     platform, token the token, message the notification's message,
//     error the error's text, notif_id the notification's.
//   - core/core.go: FailedPush = "failed-push"; PlatFormIos,
//     PlatFormAndroid, PlatFormHuawei = 1, 2, 3.
//
// So a capped token is reported as gorush reports a token its provider
// refused: a failed-push entry naming the rule in its error, counted in
// counts.

// gorushLog is gorush's logx.LogPushEntry.
type gorushLog struct {
	ID       string `json:"notif_id,omitempty"`
	Type     string `json:"type"`
	Platform string `json:"platform"`
	Token    string `json:"token"`
	Message  string `json:"message"`
	Error    string `json:"error"`
}

// gorushAnswer is what gorush's pushHandler answers (a gin.H there).
type gorushAnswer struct {
	Counts  int         `json:"counts"`
	Logs    []gorushLog `json:"logs"`
	Success string      `json:"success"`
}

// gorushError is gorush's abortWithError body.
type gorushError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

const gorushContentType = "application/json; charset=utf-8"

// gorushPlatforms are logx.typeForPlatForm's names, by core.PlatForm*
// value as JSON writes it; any other platform is "".
var gorushPlatforms = map[string]string{"1": "ios", "2": "android", "3": "huawei"}

// gorushDeny answers a refused batch with a failed-push log per recipient
// in a 200, as gorush answers tokens its provider refused. A send that is
// not a batch names no tokens to log, so it gets gorush's error shape
// with 429.
func gorushDeny(w http.ResponseWriter, _ *http.Request, d *Denial) error {
	retryAfter(w, d)
	if d.Batch == nil {
		return writeJSON(w, http.StatusTooManyRequests, gorushContentType, gorushError{http.StatusTooManyRequests, d.Message})
	}
	a := gorushAnswer{Counts: len(d.Tickets), Logs: make([]gorushLog, len(d.Tickets)), Success: "ok"}
	for i := range d.Tickets {
		a.Logs[i] = gorushFailed(d.Batch, &d.Tickets[i])
	}
	return writeJSON(w, http.StatusOK, gorushContentType, a)
}

func gorushFail(w http.ResponseWriter, _ *http.Request, f *Failure) error {
	return writeJSON(w, f.Status, gorushContentType, gorushError{f.Status, f.Reason})
}

// gorushFailed is the failed-push log of the capped entry c of b: its
// token, and the notif_id, platform and message of the notification it
// is in (read from notifications.<n> of the body, when the entry's path
// starts there, as gorush's does).
func gorushFailed(b *jsonbatch.Batch, c *jsonbatch.Capped) gorushLog {
	l := gorushLog{Type: "failed-push", Error: capMessage(c.Rule, c.RetryAfter)}
	if c.Position < 0 || c.Position >= len(b.Entries) {
		return l
	}
	e := &b.Entries[c.Position]
	l.Token = e.Text
	// A token counted in lower case ({device_token.*}: an APNs one) is
	// reported as sent, which is what the sender looks its token up by.
	var sent string
	if e.End <= len(b.Doc) && json.Unmarshal(b.Doc[e.Start:e.End], &sent) == nil && sent != e.Text && strings.EqualFold(sent, e.Text) {
		l.Token = sent
	}
	if b.Single() {
		return l // an object read as an array of it: not gorush's shape
	}
	rest, ok := strings.CutPrefix(b.EntryPath(c.Position), "notifications.")
	if !ok {
		return l
	}
	n, _, _ := strings.Cut(rest, ".")
	if _, err := strconv.Atoi(n); err != nil {
		return l
	}
	at := "notifications." + n + "."
	str := func(member string) string {
		if v := jsonbatch.Lookup(b.Doc, at+member); v.Kind == jsonbatch.String {
			return v.Text
		}
		return ""
	}
	l.ID, l.Message = str("notif_id"), str("message")
	if v := jsonbatch.Lookup(b.Doc, at+"platform"); v.Kind == jsonbatch.Number {
		l.Platform = gorushPlatforms[v.Text]
	}
	return l
}

// capMessage is the error text of a capped recipient, worded as Expo's
// tickets word it (jsonbatch.AppendCapTicket).
func capMessage(rule string, retryAfter int) string {
	return "frequency cap " + rule + ": retry in " + strconv.Itoa(retryAfter) + " s"
}

// gorushSplice merges the failed-push logs of the capped entries into
// gorush's answer to the batch without them: they are appended to its
// logs (whose order gorush does not fix: sync mode appends as sends
// finish) and counted in its counts, as gorush counts a failed token.
// The answer must be a 2xx JSON object with counts, a whole number, and
// logs, an array (or null); anything else is returned unchanged with
// ok = false, for the caller to pass on and count. The members are
// written back in gin's order (sorted), every one but counts and logs as
// the upstream wrote it (compacted), without a trailing newline, as gin
// writes them.
func gorushSplice(status int, body []byte, b *jsonbatch.Batch, capped []jsonbatch.Capped) (out []byte, ok bool) {
	if status < 200 || status > 299 || jsonbatch.Valid(body) != nil {
		return body, false
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(body, &members); err != nil {
		return body, false
	}
	counts, err := strconv.ParseInt(string(members["counts"]), 10, 64)
	if err != nil || counts < 0 || counts > math.MaxInt64-int64(len(capped)) {
		return body, false
	}
	raw, found := members["logs"]
	if !found || (!bytes.Equal(raw, []byte("null")) && (len(raw) == 0 || raw[0] != '[')) {
		return body, false
	}
	var logs []json.RawMessage
	if err := json.Unmarshal(raw, &logs); err != nil {
		return body, false
	}
	if len(capped) == 0 {
		return body, true
	}
	for i := range capped {
		l, err := json.Marshal(gorushFailed(b, &capped[i]))
		if err != nil {
			return body, false
		}
		logs = append(logs, l)
	}
	if logs == nil {
		logs = []json.RawMessage{}
	}
	members["counts"] = strconv.AppendInt(nil, counts+int64(len(capped)), 10)
	if members["logs"], err = json.Marshal(logs); err != nil {
		return body, false
	}
	if out, err = json.Marshal(members); err != nil {
		return body, false
	}
	return out, true
}
