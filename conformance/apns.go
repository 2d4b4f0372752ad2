package conformance

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"regexp"
	"strings"
	"sync"
)

// apnsDevicePath matches /3/device/{device token} (hex, 64 digits for a
// real device; any hex here).
var apnsDevicePath = regexp.MustCompile(`^/3/device/([0-9a-fA-F]+)$`)

// APNs is a mock of Apple's Push Notification service provider API as
// api.push.apple.com answers a valid request: POST /3/device/{token} with an
// apns-topic and a JSON payload of at most 4 KB gets 200 with the apns-id
// header (the request's, or a new UUID) and an empty body. Errors are
// APNs's {"reason": ...}: 400 BadDeviceToken / MissingTopic / BadPath...,
// 403 MissingProviderToken / InvalidProviderToken when the provider token
// (an ES256 JWT, checked against PublicKey when set) is missing or does
// not verify, 405 MethodNotAllowed, 413 PayloadTooLarge. (Apple serves
// HTTP/2 only; the mock takes whatever the gateway speaks to it.)
type APNs struct {
	Recorder
	// PublicKey, when set, is the key the provider tokens must be signed with.
	PublicKey *ecdsa.PublicKey
	// KeyID and TeamID, when set, must be the token's kid and iss.
	KeyID, TeamID string

	mu     sync.Mutex
	pushes []string
}

// Pushes returns the device token of every accepted push, in order.
func (a *APNs) Pushes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.pushes...)
}

// Count returns how many pushes each device token got.
func (a *APNs) Count() map[string]int {
	n := map[string]int{}
	for _, d := range a.Pushes() {
		n[d]++
	}
	return n
}

func (a *APNs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := a.read(r)
	id := r.Header.Get("apns-id")
	if id == "" {
		id = UUID()
	}
	w.Header().Set("apns-id", id)
	reason := func(status int, why string) {
		writeJSON(w, status, `{"reason":"`+why+`"}`)
	}
	m := apnsDevicePath.FindStringSubmatch(r.URL.Path)
	switch {
	case r.Method != http.MethodPost:
		reason(http.StatusMethodNotAllowed, "MethodNotAllowed")
		return
	case !strings.HasPrefix(r.URL.Path, "/3/device/"):
		reason(http.StatusNotFound, "BadPath")
		return
	case m == nil:
		reason(http.StatusBadRequest, "BadDeviceToken")
		return
	}
	auth := r.Header.Get("Authorization")
	if !strings.HasPrefix(strings.ToLower(auth), "bearer ") {
		reason(http.StatusForbidden, "MissingProviderToken")
		return
	}
	if !a.tokenValid(strings.TrimSpace(auth[len("bearer "):])) {
		reason(http.StatusForbidden, "InvalidProviderToken")
		return
	}
	if r.Header.Get("apns-topic") == "" {
		reason(http.StatusBadRequest, "MissingTopic")
		return
	}
	if len(got.Body) > 4096 {
		reason(http.StatusRequestEntityTooLarge, "PayloadTooLarge")
		return
	}
	var payload struct {
		APS json.RawMessage `json:"aps"`
	}
	if err := json.Unmarshal(got.Body, &payload); err != nil || len(payload.APS) == 0 {
		reason(http.StatusBadRequest, "PayloadEmpty")
		return
	}
	a.mu.Lock()
	a.pushes = append(a.pushes, m[1])
	a.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// tokenValid checks an ES256 provider token: header alg and kid, claim iss,
// and the signature when PublicKey is set.
func (a *APNs) tokenValid(jwt string) bool {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return false
	}
	var hdr struct{ Alg, Kid string }
	var claims struct {
		Iss string `json:"iss"`
		Iat int64  `json:"iat"`
	}
	if !decodeSegment(parts[0], &hdr) || !decodeSegment(parts[1], &claims) {
		return false
	}
	if hdr.Alg != "ES256" || claims.Iat == 0 ||
		(a.KeyID != "" && hdr.Kid != a.KeyID) || (a.TeamID != "" && claims.Iss != a.TeamID) {
		return false
	}
	if a.PublicKey == nil {
		return true
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return false
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	return ecdsa.Verify(a.PublicKey, sum[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
}

func decodeSegment(s string, v any) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && json.Unmarshal(b, v) == nil
}
