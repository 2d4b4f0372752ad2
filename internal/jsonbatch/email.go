package jsonbatch

import (
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// EmailAddress reads an email address field as the mailboxes it names
// (see Mailboxes).
var EmailAddress = &Reader{Name: "email", Read: Mailboxes}

// Mailboxes returns the mailboxes a field names, each as Mailbox counts
// it: one address; one with a display name ("Bob <bob@example.com>", which
// mail APIs that take RFC 5322 addresses deliver to bob@example.com) or a
// comment ("bob@example.com (Bob)"); or a list of them separated by
// commas ("ann@x.com, Bob <bob@x.com>"), each once. Read as one address,
// each of those would be a mailbox no addressee's cap shares.
func Mailboxes(text string) ([]string, error) {
	t := TrimKey(text)
	if !strings.HasSuffix(t, ">") && !unquotedAny(t, ",(<") {
		m, err := Mailbox(text)
		if err != nil {
			return nil, err
		}
		return []string{m}, nil
	}
	list, err := mail.ParseAddressList(t)
	if err != nil {
		return nil, fmt.Errorf("%q is not an email address, nor a list of them (%v)", text, err)
	}
	out := make([]string, 0, len(list))
	seen := make(map[string]bool, len(list))
	for _, a := range list {
		// net/mail gives the local part unquoted ("a b"@x is a b@x):
		// quoted again where it needs it, it reads back as itself.
		addr := a.Address
		if at := strings.LastIndexByte(addr, '@'); at > 0 && !dotAtom(addr[:at]) {
			addr = strconv.Quote(addr[:at]) + addr[at:]
		}
		m, err := Mailbox(addr)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", text, err)
		}
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out, nil
}

// unquotedAny reports whether s has one of chars outside double quotes:
// a list's comma, a comment's "(" or an address's "<", where a quoted
// local part may hold any of them.
func unquotedAny(s, chars string) bool {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && strings.IndexByte(chars, c) >= 0:
			return true
		}
	}
	return false
}

// Mailbox returns the mailbox an address names, as a cap counts it:
// without the white space around it and in lower case, so that a sender
// cannot reach a capped addressee by respelling her address ("Ann@Example.com",
// " ann@example.com"). Domains are case-blind (RFC 5321); a local part may
// in theory not be, but the mail services a gateway sends through deliver
// it case-blind, and two mailboxes told apart by case alone would at worst
// share a cap. A domain is one name however written, so it is counted in
// its ASCII form without a root dot ("exämple.com." is xn--exmple-cua.com),
// and a quoted local part that needs no quotes is the bare one ("ann"@ is
// ann@). A text without a local part and a domain around its last "@" is
// refused, as the services refuse it.
func Mailbox(addr string) (string, error) {
	a := TrimKey(addr)
	at := strings.LastIndexByte(a, '@')
	if at <= 0 || at == len(a)-1 {
		return "", fmt.Errorf("%q is not an email address (local-part@domain)", addr)
	}
	local, domain := strings.ToLower(a[:at]), strings.ToLower(rootless(a[at+1:]))
	if domain == "" {
		return "", fmt.Errorf("%q is not an email address (local-part@domain)", addr)
	}
	// A name IDNA cannot map is kept as written (in lower case): it is
	// then no name a mail service delivers to under another spelling.
	if d, err := idna.Lookup.ToASCII(domain); err == nil && d != "" && utf8.ValidString(domain) {
		domain = rootless(d) // an ideographic full stop maps to a root dot
	}
	if domain == "" {
		return "", fmt.Errorf("%q is not an email address (local-part@domain)", addr)
	}
	if i := strings.IndexFunc(domain, notInDomain); i >= 0 {
		return "", fmt.Errorf("%q is not an email address (%q cannot be in a domain)", addr, domain[i:i+1])
	}
	if n := len(local); n > 2 && local[0] == '"' && local[n-1] == '"' && dotAtom(local[1:n-1]) {
		local = local[1 : n-1]
	}
	return local + "@" + domain, nil
}

// notInDomain reports whether r can be in no domain, nor in a domain
// literal ("[192.0.2.1]"): white space, a control, or a character that
// ends or delimits an address in a header ("<>(),;\"\\"). A domain
// holding one is no mailbox a service delivers to, and would read as
// another text ("a@x>." would be a@x>, an unclosed angle address).
func notInDomain(r rune) bool {
	return r <= ' ' || r == 0x7f || strings.ContainsRune("<>(),;\"\\", r)
}

// rootless is a domain without its root dots ("example.com." is
// example.com) and what trimming leaves around them.
func rootless(d string) string {
	for {
		t := TrimKey(strings.TrimRight(d, "."))
		if t == d {
			return d
		}
		d = t
	}
}

// dotAtom reports whether s is a local part that needs no quotes (RFC 5322's
// dot-atom: atoms of letters, digits and !#$%&'*+-/=?^_`{|}~ joined by
// single dots; RFC 6532 adds every non-ASCII character, so "jörg"@ is
// jörg@).
func dotAtom(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c >= 0x80 || strings.IndexByte("!#$%&'*+-/=?^_`{|}~.", c) >= 0) {
			return false
		}
	}
	return true
}
