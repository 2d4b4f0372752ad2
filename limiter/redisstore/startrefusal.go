package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// This file turns what a start check found into the refusals that must
// stop a configuration from loading: a server that answered and refused
// the login, or a command the store needs, or whose certificate this
// client does not trust. Waiting mends neither, and
// under on_error allow either would leave every recipient uncapped, so a
// gateway must not start on them. A server that did not answer is an
// outage, left to on_error.

// RefusedError is one server's refusal found at start: of the login, or
// of the commands in Refused.
type RefusedError struct {
	// Node is the server's address as dialed (for the master a Sentinel
	// client follows, as a sentinel named it, or "sentinel"), or
	// "cluster" for the seed nodes of a cluster whose slot map could not
	// be read.
	Node string
	// Sentinel is set when the server is a sentinel (asked with the
	// sentinel credentials), not a data node.
	Sentinel bool
	// User is the user the gateway logged in as, for the message ("":
	// the default user); the caller fills it in, the store does not
	// know it.
	User string
	// Login is the server's refusal of the login (WRONGPASS, NOAUTH), or
	// nil.
	Login error
	// Certificate is the failed check of the certificate the server
	// presented (an unknown CA, another host name, expired), or nil.
	Certificate error
	// SpeaksTLS is a server that completed a TLS handshake where the
	// store connects without TLS (see Config.MarkTLSServers).
	SpeaksTLS bool
	// Refused are the commands the user may not run.
	Refused []Refusal
}

func (e *RefusedError) Error() string {
	what := "redis"
	if e.Sentinel {
		what = "redis sentinel"
	}
	user := "the default user"
	if e.User != "" {
		user = fmt.Sprintf("user %q", e.User)
	}
	if e.Login != nil {
		return fmt.Sprintf("%s at %s refused the login of %s: %v", what, e.Node, user, e.Login)
	}
	if e.Certificate != nil {
		return fmt.Sprintf("%s at %s presented a certificate the gateway does not trust (check tls_ca and tls_server_name): %v", what, e.Node, e.Certificate)
	}
	if e.SpeaksTLS {
		return fmt.Sprintf("%s at %s speaks TLS, and the store connects to it without: the server closes every plain connection", what, e.Node)
	}
	rs := make([]string, len(e.Refused))
	for i, r := range e.Refused {
		rs[i] = r.String()
	}
	if len(e.Refused) == 1 && e.Refused[0].Kind.wrongKind() {
		return fmt.Sprintf("%s at %s is the wrong kind of server for the settings: %s", what, e.Node, rs[0])
	}
	for _, r := range e.Refused {
		if r.Kind == RefusedByACL {
			return fmt.Sprintf("%s at %s refused %s what the store needs: %s", what, e.Node, user, strings.Join(rs, "; "))
		}
	}
	return fmt.Sprintf("%s at %s refused what the store needs: %s", what, e.Node, strings.Join(rs, "; "))
}

// Unwrap makes errors.Is find ErrLoginRefused, ErrUntrustedCertificate,
// ErrTLSExpected or ErrNoPermission.
func (e *RefusedError) Unwrap() error {
	switch {
	case e.Login != nil:
		return ErrLoginRefused
	case e.Certificate != nil:
		return ErrUntrustedCertificate
	case e.SpeaksTLS:
		return ErrTLSExpected
	}
	return ErrNoPermission
}

// Fix says what mends the refusal, for the message that stops a load.
func (e *RefusedError) Fix() string {
	switch {
	case e.Login != nil:
		return "fix the username and password"
	case e.Certificate != nil:
		return "give tls_ca the CA that signed the server's certificate, and tls_server_name a name it is valid for"
	case e.SpeaksTLS:
		return "turn tls on, with a rediss:// url or tls in the redis block, and tls_ca when a private CA signed the server's certificate"
	}
	var fixes []string
	for _, r := range e.Refused {
		if f := r.Kind.Fix(); !slices.Contains(fixes, f) {
			fixes = append(fixes, f)
		}
	}
	return strings.Join(fixes, "; ")
}

// Refusals returns each node's refusal, in the order the nodes were
// asked; none when every node that answered lets the store do what it
// needs. The master a Sentinel client follows is left out when a
// sentinel refused (it could not be reached but through one), and named
// by the address a sentinel gave for it when one did.
func (c StartCheck) Refusals() []*RefusedError {
	var out []*RefusedError
	sentinelRefused := false
	master := sentinelNode
	for _, n := range c.Nodes {
		if !n.Sentinel {
			continue
		}
		sentinelRefused = sentinelRefused || IsLoginRefusal(n.Err) || len(n.Refused) > 0
		if addr, ok := strings.CutPrefix(n.Server, "master "); ok && master == sentinelNode {
			master = addr
		}
	}
	for _, n := range c.Nodes {
		var e *RefusedError
		switch {
		case LoginRefusal(n.Err) != nil:
			e = &RefusedError{Node: n.Node, Sentinel: n.Sentinel, Login: LoginRefusal(n.Err)}
		case CertificateRefusal(n.Err) != nil:
			e = &RefusedError{Node: n.Node, Sentinel: n.Sentinel, Certificate: CertificateRefusal(n.Err)}
		case n.SpeaksTLS:
			e = &RefusedError{Node: n.Node, Sentinel: n.Sentinel, SpeaksTLS: true}
		case n.Err == nil && len(n.Refused) > 0:
			e = &RefusedError{Node: n.Node, Sentinel: n.Sentinel, Refused: n.Refused}
		default:
			continue
		}
		if n.Node == sentinelNode {
			if sentinelRefused {
				continue
			}
			e.Node = master
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		if login := LoginRefusal(c.Err); login != nil {
			out = append(out, &RefusedError{Node: "cluster", Login: login})
		} else if cert := CertificateRefusal(c.Err); cert != nil {
			out = append(out, &RefusedError{Node: "cluster", Certificate: cert})
		}
	}
	return out
}

// sentinelNode is the name of the master a Sentinel client follows.
const sentinelNode = "sentinel"

// CheckSentinels asks each sentinel of a Sentinel config, with the
// sentinel credentials, for the master it watches (SENTINEL
// GET-MASTER-ADDR-BY-NAME, what go-redis asks first), so that a refusal
// names the sentinel that made it: go-redis's own error says only that
// every sentinel was "unreachable". It returns nothing for other configs.
// ctx bounds the whole check.
func (c *Config) CheckSentinels(ctx context.Context) []NodeCheck {
	if c.SentinelMaster == "" {
		return nil
	}
	timeout := c.EffectiveTimeout()
	dial := c.DialTimeout
	if dial == 0 {
		dial = timeout
	}
	var tc *tls.Config
	var tcErr error
	if c.TLS {
		tc, tcErr = c.tlsConfig()
	}
	out := make([]NodeCheck, len(c.Addresses))
	var wg sync.WaitGroup
	for i, addr := range c.Addresses {
		out[i] = NodeCheck{Node: addr, Sentinel: true}
		if tcErr != nil {
			out[i].Err = tcErr
			continue
		}
		opt := &redis.Options{Addr: addr, Username: c.SentinelUsername, Password: c.SentinelPassword, TLSConfig: tc,
			DialTimeout: dial, ReadTimeout: timeout, WriteTimeout: timeout, ContextTimeoutEnabled: true, Dialer: c.dialer}
		opt.MaxRetries, opt.DialerRetries, opt.DialerRetryTimeout = failFast()
		wg.Add(1)
		go func(nc *NodeCheck) {
			defer wg.Done()
			sc := redis.NewSentinelClient(opt)
			defer sc.Close()
			addr, err := sc.GetMasterAddrByName(ctx, c.SentinelMaster).Result()
			switch {
			case IsPermissionRefusal(err):
				nc.Refused = []Refusal{{Command: "sentinel|get-master-addr-by-name", Reason: err.Error()}}
			case err != nil:
				nc.Err = err
			case len(addr) == 2:
				nc.Server = "master " + addr[0] + ":" + addr[1]
			}
		}(&out[i])
	}
	wg.Wait()
	wrongTopology(out, c.SentinelMaster)
	return out
}

// wrongTopology makes refusals of the sentinels' answers that say the
// config names the wrong thing, when no sentinel named a master: servers
// that know no SENTINEL command are no sentinels, and sentinels that all
// answer nil watch no master of that name. Either is waited out forever,
// every send going to on_error. While one sentinel names the master the
// others' answers are left as they are: go-redis asks that one.
func wrongTopology(sentinels []NodeCheck, master string) {
	for _, nc := range sentinels {
		if nc.Server != "" || len(nc.Refused) > 0 {
			return
		}
	}
	for i := range sentinels {
		nc := &sentinels[i]
		switch {
		case errors.Is(nc.Err, redis.Nil):
			nc.Refused = []Refusal{{Command: "sentinel|get-master-addr-by-name", Reason: fmt.Sprintf("no master named %q", master), Kind: RefusedUnknownMaster}}
			nc.Err = nil
		case unknownCommand(nc.Err):
			nc.Refused = []Refusal{{Command: "sentinel", Reason: nc.Err.Error() + " (the server is no Sentinel)", Kind: RefusedNotSentinel}}
			nc.Err = nil
		}
	}
}

// unknownCommand reports whether err is a server's answer that it knows
// no such command.
func unknownCommand(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "ERR unknown command")
}

// ErrUntrustedCertificate is a server's certificate that failed this
// client's check: waiting does not mend it, so at start it fails the load.
var ErrUntrustedCertificate = storeError("the redis server's TLS certificate failed verification")

// CertificateRefusal returns the failed check of a server's certificate
// in err's tree (an unknown CA, another host name, an expired or otherwise
// invalid certificate), or nil. A server that does not speak TLS at all is
// no such failure: it never completes the handshake, and looks down.
func CertificateRefusal(err error) error {
	var ve *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &ve):
		return ve
	case errors.As(err, &ua):
		return ua
	case errors.As(err, &he):
		return he
	case errors.As(err, &ci):
		return ci
	}
	return nil
}

// ErrTLSExpected is a server that speaks TLS reached by a store that
// connects without it: the server closes each plain connection at its
// first byte (go-redis sees EOF), which looks like an outage and lasts
// until the config turns tls on, so at start it fails the load.
var ErrTLSExpected = storeError("the redis server speaks TLS, and the store connects without it")

// MarkTLSServers notes, for a config without TLS, each node of check that
// could not be asked and completes a TLS handshake (NodeCheck.SpeaksTLS),
// so that Refusals names it. When the check reached no node at all (a
// cluster's slot map unread), the config's own addresses are tried. ctx
// bounds the handshakes.
func (c *Config) MarkTLSServers(ctx context.Context, check *StartCheck) {
	if c.TLS || strings.HasPrefix(c.URL, "rediss://") {
		return
	}
	var wg sync.WaitGroup
	for i := range check.Nodes {
		n := &check.Nodes[i]
		if n.Err == nil || n.Node == sentinelNode || CertificateRefusal(n.Err) != nil || IsLoginRefusal(n.Err) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.SpeaksTLS = c.speaksTLS(ctx, n.Node)
		}()
	}
	wg.Wait()
	if check.Err == nil || len(check.Nodes) > 0 {
		return
	}
	for _, addr := range c.addresses() {
		if c.speaksTLS(ctx, addr) {
			check.Nodes = append(check.Nodes, NodeCheck{Node: addr, Err: check.Err, SpeaksTLS: true})
		}
	}
}

// speaksTLS reports whether the server at addr completes a TLS handshake.
// The certificate is not checked: this only asks which protocol the
// server speaks, and no data is sent over the connection.
func (c *Config) speaksTLS(ctx context.Context, addr string) bool {
	d := c.dialer
	if d == nil {
		d = (&net.Dialer{Timeout: c.EffectiveTimeout()}).DialContext
	}
	ctx, cancel := context.WithTimeout(ctx, 2*c.EffectiveTimeout())
	defer cancel()
	conn, err := d(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	host, _, _ := net.SplitHostPort(addr)
	tc := tls.Client(conn, &tls.Config{ServerName: host, InsecureSkipVerify: true}) //nolint:gosec // asks the protocol only; nothing is sent
	return tc.HandshakeContext(ctx) == nil
}
