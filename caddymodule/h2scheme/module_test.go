package h2scheme

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/freqcap/caddy-freqcap/conformance"
	"github.com/freqcap/caddy-freqcap/internal/h2raw"
)

func TestMain(m *testing.M) { os.Exit(conformance.Main(m)) }

// TestUnmarshalCaddyfile: the grammar in UnmarshalCaddyfile's comment,
// and an error naming the line for each mistake.
func TestUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Wrapper
		err  string
	}{
		{in: "h2_scheme", want: Wrapper{}},
		{in: "h2_scheme {\n handshake_timeout 3s\n max_header_bytes 2MiB\n}", want: Wrapper{HandshakeTimeout: 3e9, MaxHeaderBytes: 2 << 20}},
		{in: "h2_scheme on", err: "wrong argument count"},
		{in: "h2_scheme {\n handshake_timeout -1s\n}", err: "not a positive duration"},
		{in: "h2_scheme {\n max_header_bytes lots\n}", err: "not a size"},
		{in: "h2_scheme {\n max_header_bytes 1KiB 2KiB\n}", err: "wrong argument count"},
		{in: "h2_scheme {\n scheme https\n}", err: `unrecognized subdirective "scheme"`},
	} {
		var w Wrapper
		err := w.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "Testfile:") {
				t.Errorf("%q: got %v, want an error with %q naming the line", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || w != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.in, w, err, tc.want)
		}
	}
}

// fcmHeaders are the fields firebase-admin for Node sends with a message,
// its scheme as given.
func fcmHeaders(scheme string, n int) []hpack.HeaderField {
	return h2raw.Request(scheme, "/v1/projects/demo/messages:send",
		"content-type", "application/json",
		"authorization", "Bearer ya29."+strings.Repeat("x", 180),
		"x-goog-api-client", "gl-node/22.12.0 fire-admin/13.6.0",
		"x-firebase-client", "fire-admin-node/13.6.0",
		"access_token_auth", "true",
		"user-agent", "node-fetch",
		"x-request-n", strconv.Itoa(n))
}

// fcmBody is an FCM v1 message of the usual size.
var fcmBody = []byte(`{"message":{"token":"` + strings.Repeat("d", 163) + `","notification":{"title":"Your order has shipped","body":"It arrives on Thursday between 9 and 12."},"data":{"order":"4711","kind":"shipping"},"android":{"priority":"high"}}}`)

// gateway runs a Caddy that proxies FCM's send path over HTTPS to an
// upstream that answers as FCM, with or without h2_scheme, and dials it
// over HTTP/2.
func gateway(t testing.TB, wrapped bool, upstream http.Handler) (*conformance.Caddy, *h2raw.Client) {
	t.Helper()
	g := startFCMGateway(t, wrapped, upstream)
	return g.caddy, g.dial(t)
}

// fcmGateway is a running Caddy in front of an FCM mock.
type fcmGateway struct {
	caddy *conformance.Caddy
	addr  string
	pki   *conformance.PKI
}

func startFCMGateway(t testing.TB, wrapped bool, upstream http.Handler) *fcmGateway {
	t.Helper()
	pki := conformance.NewPKI(t, "127.0.0.1")
	up := conformance.Serve(t, upstream)
	port := conformance.FreePort(t)
	opts := ""
	if wrapped {
		opts = "listener_wrappers {\n\th2_scheme\n}\n"
	}
	c := conformance.StartCaddyWith(t, opts, fmt.Sprintf(`https://:%d {
	tls %s %s
	reverse_proxy %s {
		header_up X-Tls-Version {http.request.tls.version}
	}
}
`, port, pki.CertFile, pki.KeyFile, up))
	return &fcmGateway{caddy: c, addr: fmt.Sprintf("127.0.0.1:%d", port), pki: pki}
}

// dial opens one more HTTP/2 connection to the gateway.
func (g *fcmGateway) dial(t testing.TB) *h2raw.Client {
	t.Helper()
	conn, err := tls.Dial("tcp", g.addr, &tls.Config{RootCAs: g.pki.Pool, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return h2raw.New(t, conn)
}

// fcm answers as FCM does, after checking the request came over TLS.
func fcm(tlsSeen *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tls-Version") != "" {
			tlsSeen.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"name":"projects/demo/messages/0:1"}`)
	}
}

// TestSchemeWithColonThroughCaddy proves the deployment: through a real
// Caddy with `listener_wrappers { h2_scheme }`, requests written with
// `:scheme: https:` (firebase-admin for Node's HTTP/2 transport), many
// streams at once and mixed with ordinary ones on one connection, reach
// the upstream and get its answer, and Caddy still knows each came over
// TLS (r.TLS, from the wrapper's ConnectionState). Without the wrapper
// Caddy's Go server resets each such stream with PROTOCOL_ERROR.
func TestSchemeWithColonThroughCaddy(t *testing.T) {
	var tlsSeen atomic.Int64
	_, bare := gateway(t, false, fcm(&tlsSeen))
	if r := bare.Send(fcmHeaders("https:", 0), fcmBody, 0); r.Reset != http2.ErrCodeProtocol {
		t.Fatalf("without h2_scheme: %+v, want the stream reset with PROTOCOL_ERROR", r)
	}

	tlsSeen.Store(0)
	_, c := gateway(t, true, fcm(&tlsSeen))
	sent := 0
	for round := 0; round < 20; round++ {
		var ids []uint32
		for i := 0; i < 10; i++ {
			scheme := "https:"
			if i%3 == 0 {
				scheme = "https"
			}
			id, err := c.Write(fcmHeaders(scheme, sent), fcmBody, 0)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			sent++
		}
		for id, r := range c.ReadMany(ids...) {
			if r.Status != "200" || !strings.Contains(string(r.Body), "projects/demo/messages") {
				t.Fatalf("stream %d: status %q reset %v header %v body %q", id, r.Status, r.Reset, r.Header, r.Body)
			}
		}
	}
	if got := tlsSeen.Load(); got != int64(sent) {
		t.Errorf("the upstream saw %d of %d requests marked as TLS", got, sent)
	}
}

// TestValidateBounds: a JSON config is held to the Caddyfile's bounds (a
// max_header_bytes past 1 GiB validated, though the Caddyfile refuses it).
func TestValidateBounds(t *testing.T) {
	for _, tc := range []struct {
		w  Wrapper
		ok bool
	}{
		{Wrapper{}, true},
		{Wrapper{MaxHeaderBytes: 1 << 30}, true},
		{Wrapper{MaxHeaderBytes: 1<<30 + 1}, false},
		{Wrapper{MaxHeaderBytes: -1}, false},
		{Wrapper{HandshakeTimeout: -1}, false},
	} {
		if err := tc.w.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.w, err)
		}
	}
}
