package conformance_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

type expoReceipt struct {
	Status  string         `json:"status"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

type expoReceiptsResult struct {
	Tickets  []expoTicket           `json:"tickets"`
	Receipts map[string]expoReceipt `json:"receipts"`
	Error    *struct {
		Name    string `json:"name"`
		Message string `json:"message"`
	} `json:"error"`
	Ms   int           `json:"ms"`
	Wire []wireRequest `json:"wire"`
}

// TestExpoReceipts proves, with expo-server-sdk pointed at the Expo gateway
// (expoSite, whose frequency_cap matches the send path only), that
// getPushNotificationReceiptsAsync passes through untouched: a batch is
// sent first (one recipient capped: its error ticket has no id, so it has
// no receipt to ask for), then the receipts of its tickets are asked for
// three times, more often than the cap allows a recipient anything, once
// in a body over 1 KB that the SDK gzips. Each call resolves after one
// request with the mock's receipts (ok, and Expo's DeviceNotRegistered
// error receipt with its details), ids the mock never issued left out as
// Expo leaves them out; the mock got every receipts request with its ids
// in order.
func TestExpoReceipts(t *testing.T) {
	conformance.RequireNode(t)
	mock := &conformance.Expo{GzipResponses: true}
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(expoSite, port, upstream))
	defer gw.Healthy(t)
	env := []string{fmt.Sprintf("EXPO_BASE_URL=http://127.0.0.1:%d", port)}

	A, U := expoToken("receipts-alice"), expoToken("receipts-Unregistered")
	send := []map[string]any{{"to": A, "body": "r1"}, {"to": []string{A, A, U}, "body": "r2"}}
	var out nodeOutput[expoReceiptsResult]
	conformance.RunNode(t, "expo.mjs", env, map[string]any{"calls": []any{map[string]any{"sdk": send}}}, &out)
	sent := out.Results[0]
	if sent.Error != nil || len(sent.Tickets) != 4 {
		t.Fatalf("sendPushNotificationsAsync: %s, want 4 tickets", jsonString(sent))
	}
	if sent.Tickets[2].Status != "error" || sent.Tickets[2].ID != "" {
		t.Fatalf("the third ticket for %s is %s, want a capped one (error, no id)", A, jsonString(sent.Tickets[2]))
	}
	okA := []string{sent.Tickets[0].ID, sent.Tickets[1].ID}
	okU := sent.Tickets[3].ID
	known := []string{okA[0], okA[1], okU}
	unknown := conformance.UUID()

	many := append([]string(nil), known...)
	for range 30 {
		many = append(many, conformance.UUID())
	}
	asks := [][]string{append(append([]string(nil), known...), unknown), known, many}
	var calls []any
	for _, ids := range asks {
		calls = append(calls, map[string]any{"receipts": ids})
	}
	before := len(mock.ReceiptsCalls())
	out = nodeOutput[expoReceiptsResult]{}
	conformance.RunNode(t, "expo.mjs", env, map[string]any{"calls": calls}, &out)
	got := mock.ReceiptsCalls()[before:]
	if len(got) != len(asks) {
		t.Fatalf("the mock got %d receipts requests, want %d", len(got), len(asks))
	}
	for i, r := range out.Results {
		what := fmt.Sprintf("getPushNotificationReceiptsAsync %d (%d ids)", i+1, len(asks[i]))
		oneRequest(t, what, r.Wire, 200)
		if r.Error != nil {
			t.Errorf("%s threw %s: %s", what, r.Error.Name, r.Error.Message)
			continue
		}
		body, _ := json.Marshal(map[string]any{"ids": asks[i]})
		wantEncoding := ""
		if len(body) > 1024 {
			wantEncoding = "gzip"
		}
		if got[i].ContentEncoding() != wantEncoding || !equalStrings(got[i].IDs, asks[i]) {
			t.Errorf("%s: the mock got ids %v in Content-Encoding %q, want %v in %q", what, got[i].IDs, got[i].ContentEncoding(), asks[i], wantEncoding)
		}
		if len(r.Receipts) != len(known) {
			t.Errorf("%s: %d receipts, want %d (ids the mock never issued left out): %s", what, len(r.Receipts), len(known), jsonString(r.Receipts))
		}
		for _, id := range okA {
			if r.Receipts[id].Status != "ok" {
				t.Errorf("%s: receipt %s = %s, want ok", what, id, jsonString(r.Receipts[id]))
			}
		}
		if rc := r.Receipts[okU]; rc.Status != "error" || rc.Details["error"] != "DeviceNotRegistered" {
			t.Errorf("%s: receipt %s = %s, want an error with details.error DeviceNotRegistered", what, okU, jsonString(rc))
		}
		if i == 0 {
			t.Logf("%s: %s", what, jsonString(r.Receipts))
		}
	}
}
