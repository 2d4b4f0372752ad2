package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TLSServer is a redis-server that speaks only TLS.
type TLSServer struct {
	*Server
	// CAFile is the PEM file of the CA that signed the server's
	// certificate (valid for 127.0.0.1 and localhost).
	CAFile string
}

// StartTLS generates a CA and a server certificate in a temp dir and starts
// a redis-server listening only on a TLS port (--port 0), not asking clients
// for certificates. Without TLS support in redis-server it skips (or, with
// FREQCAP_REQUIRE_REDIS=1, fails).
func StartTLS(tb testing.TB) *TLSServer {
	tb.Helper()
	path := need(tb)
	dir := tb.TempDir()
	caFile, certFile, keyFile, pool := writeCerts(tb, dir)
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			tb.Fatalf("finding a free port: %v", err)
		}
		sdir := tb.TempDir()
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		args := append(baseArgs(0, sdir),
			"--tls-port", strconv.Itoa(ports[0]),
			"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile,
			"--tls-auth-clients", "no",
		)
		s, err := launch(path, sdir, addr, ports[0], args, func() error { return tlsPing(addr, pool) })
		if err != nil {
			lastErr = err
			if strings.Contains(err.Error(), "TLS") && (strings.Contains(err.Error(), "not supported") || strings.Contains(err.Error(), "Bad directive")) {
				notSupported(tb, "redis-server was built without TLS: "+err.Error())
			}
			continue
		}
		tb.Cleanup(s.Stop)
		return &TLSServer{Server: s, CAFile: caFile}
	}
	tb.Fatalf("starting redis-server with TLS: %v", lastErr)
	return nil
}

func notSupported(tb testing.TB, why string) {
	tb.Helper()
	if os.Getenv("FREQCAP_REQUIRE_REDIS") == "1" {
		tb.Fatalf("%s (FREQCAP_REQUIRE_REDIS=1)", why)
	}
	tb.Skip(why)
}

func tlsPing(addr string, pool *x509.CertPool) error {
	d := &net.Dialer{Timeout: 200 * time.Millisecond}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err != nil {
		return err
	}
	return ping(c)
}

// writeCerts writes ca.crt, server.crt and server.key into dir and returns
// their paths and a pool holding the CA.
func writeCerts(tb testing.TB, dir string) (caFile, certFile, keyFile string, pool *x509.CertPool) {
	tb.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "freqcap test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		tb.Fatal(err)
	}
	caFile = filepath.Join(dir, "ca.crt")
	certFile = filepath.Join(dir, "server.crt")
	keyFile = filepath.Join(dir, "server.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", srvDER}, {keyFile, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return caFile, certFile, keyFile, pool
}
