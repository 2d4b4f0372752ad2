package caddymodule_test

import (
	"net/http"
	"testing"
)

// TestBatchDropKeepsSurroundingSpace proves that a batch rewritten under
// drop keeps the white space around its document as sent, as it keeps
// every other byte but the dropped entries': a probe's trailing newline,
// and leading spaces, were cut from what the upstream got.
func TestBatchDropKeepsSurroundingSpace(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, batchSeedSite(batchName(), "", up.addr(), "batch drop"))
	const msg = `{"to":"bob","body":"same"}`
	body := "\n  [" + msg + "," + msg + ", " + msg + "]\r\n"
	expectStatus(t, g.post("/push/send", "application/json", body), http.StatusOK)
	if got, want := string(up.last().body), "\n  ["+msg+","+msg+"]\r\n"; got != want {
		t.Errorf("upstream got %q, want %q", got, want)
	}
}

// TestBatchDropDropsDigests proves that a batch rewritten under drop goes
// on without the sender's digests of the body it had (Content-MD5,
// Digest, Content-Digest, Repr-Digest), which an upstream that checks
// them would refuse it by; a batch passed on whole keeps them.
func TestBatchDropDropsDigests(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, batchSeedSite(batchName(), "", up.addr(), "batch drop"))
	digests := []string{"Content-MD5: x", "Digest: sha-256=x", "Content-Digest: sha-256=:x:", "Repr-Digest: sha-256=:x:"}
	const msg = `{"to":"dan","body":"same"}`
	expectStatus(t, g.post("/push/send", "application/json", "["+msg+","+msg+"]", digests...), http.StatusOK)
	for _, k := range []string{"Content-Md5", "Digest", "Content-Digest", "Repr-Digest"} {
		if v := up.last().header.Get(k); v == "" {
			t.Errorf("a batch passed whole lost its %s", k)
		}
	}
	other := `{"to":"dan","body":"other"}`
	expectStatus(t, g.post("/push/send", "application/json", "["+other+","+msg+"]", digests...), http.StatusOK)
	if got := string(up.last().body); got != "["+other+"]" {
		t.Fatalf("upstream got %s, want the third same body dropped", got)
	}
	for _, k := range []string{"Content-Md5", "Digest", "Content-Digest", "Repr-Digest"} {
		if v := up.last().header.Get(k); v != "" {
			t.Errorf("a rewritten batch kept %s: %q", k, v)
		}
	}
}
