package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// StartTLS serves TLS only, with a certificate that the CA it writes
// verifies for 127.0.0.1; a plain-text client gets nothing.
func TestStartTLS(t *testing.T) {
	s := StartTLS(t)
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("CA file holds no certificate")
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	if err := rawPing(s.Addr); err == nil {
		t.Fatal("the server answered plain text")
	}
}
