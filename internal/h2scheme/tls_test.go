package h2scheme

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// testCert is a self-signed certificate for 127.0.0.1 with key.
func testCert(t *testing.T, key any, pub any) tls.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "h2scheme test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsListener is a TLS listener wrapped as Caddy wraps it, accepting
// down to TLS 1.0 and every cipher suite Go has, so that only the
// wrapper's own checks stand between a weak client and HTTP/2.
func tlsListener(t *testing.T, opts Options) net.Listener {
	t.Helper()
	ek, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rk, _ := rsa.GenerateKey(rand.Reader, 2048)
	var suites []uint16
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		suites = append(suites, s.ID)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{testCert(t, ek, &ek.PublicKey), testCert(t, rk, &rk.PublicKey)},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS10,
		CipherSuites: suites,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &Listener{Listener: tls.NewListener(ln, cfg), Options: opts}
}

// firstRead accepts one connection and returns what its first Read
// gave, and the connection.
func firstRead(t *testing.T, ln net.Listener) (chan error, chan net.Conn) {
	errs, conns := make(chan error, 1), make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errs <- err
			return
		}
		conns <- c
		_, err = c.Read(make([]byte, 64))
		errs <- err
	}()
	return errs, conns
}

// TestWeakTLSGetsInadequateSecurity proves the HTTP/2 TLS checks hold on
// a wrapped connection, which Go's server cannot see as TLS: a client
// that negotiates h2 over TLS 1.1, or TLS 1.2 with a CBC suite, gets
// GOAWAY INADEQUATE_SECURITY and no HTTP/2; TLS 1.2 with an AEAD suite
// and TLS 1.3 pass, and the connection reports its TLS state.
func TestWeakTLSGetsInadequateSecurity(t *testing.T) {
	cases := []struct {
		name   string
		client *tls.Config
		weak   bool
	}{
		{"TLS 1.1", &tls.Config{MaxVersion: tls.VersionTLS11}, true},
		{"TLS 1.2 CBC", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA}}, true},
		{"TLS 1.2 RSA key exchange", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}}, true},
		{"TLS 1.2 GCM", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}, false},
		{"TLS 1.3", &tls.Config{MinVersion: tls.VersionTLS13}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln := tlsListener(t, Options{})
			errs, conns := firstRead(t, ln)
			cfg := tc.client.Clone()
			cfg.InsecureSkipVerify = true // the test's own throwaway certificate
			cfg.NextProtos = []string{"h2"}
			cfg.MinVersion = min(cfg.MinVersion, tls.VersionTLS10)
			if cfg.MinVersion == 0 {
				cfg.MinVersion = tls.VersionTLS10
			}
			c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
				t.Fatal(err)
			}
			server := <-conns
			if tc.weak {
				fr := http2.NewFramer(nil, c)
				f, err := fr.ReadFrame()
				if err != nil {
					t.Fatalf("reading the server's first frame: %v", err)
				}
				if g, ok := f.(*http2.GoAwayFrame); !ok || g.ErrCode != http2.ErrCodeInadequateSecurity {
					t.Fatalf("got %v, want GOAWAY INADEQUATE_SECURITY", f)
				}
				if err := <-errs; err == nil {
					t.Fatal("the server read on")
				}
				return
			}
			if err := <-errs; err != nil {
				t.Fatalf("the server's first read: %v", err)
			}
			st := server.(interface{ ConnectionState() tls.ConnectionState }).ConnectionState()
			if st.NegotiatedProtocol != "h2" || !st.HandshakeComplete {
				t.Fatalf("ConnectionState: %+v", st)
			}
		})
	}
}

// TestHandshakeIsLazyAndBounded proves Accept does no I/O (a client that
// never speaks does not hold up the accept loop) and the handshake, done
// by the first Read, ends after HandshakeTimeout.
func TestHandshakeIsLazyAndBounded(t *testing.T) {
	ln := tlsListener(t, Options{HandshakeTimeout: 200 * time.Millisecond})
	errs, conns := firstRead(t, ln)
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	select {
	case <-conns:
	case <-time.After(5 * time.Second):
		t.Fatal("Accept waited for the client")
	}
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("a silent client's handshake succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handshake outlived its timeout")
	}
}

// TestPrefaceNeedsH2 proves HTTP/2 over TLS needs ALPN's h2, and h2 needs
// HTTP/2, as with Go's server: a client that negotiated http/1.1 and
// sends the HTTP/2 preface is refused, an HTTP/1.1 request passes
// untouched; a client that negotiated h2 and sends HTTP/1.1 is refused (a
// probe's was served as HTTP/1.1, a wrapped connection being no
// *tls.Conn to net/http).
func TestPrefaceNeedsH2(t *testing.T) {
	for _, tc := range []struct {
		alpn, send string
		ok         bool
	}{
		{"http/1.1", http2.ClientPreface, false},
		{"http/1.1", "GET / HTTP/1.1\r\n\r\n", true},
		{"h2", "GET / HTTP/1.1\r\n\r\n", false},
		{"h2", "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", false},
	} {
		ln := tlsListener(t, Options{})
		errs, conns := firstRead(t, ln)
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{tc.alpn}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, tc.send); err != nil {
			t.Fatal(err)
		}
		server := <-conns
		err = <-errs
		if tc.ok && err != nil {
			t.Errorf("%q: %v", tc.send, err)
		}
		if !tc.ok {
			// The preface may arrive over several reads: read on.
			for err == nil {
				_, err = server.Read(make([]byte, 64))
			}
			if errors.Is(err, io.EOF) {
				t.Errorf("%q: read to its end, want a refusal", tc.send)
			}
		}
		c.Close()
	}
}
