package jsonbatch

import (
	"fmt"
	"strings"
)

// EmailAddress reads an email address field as the mailbox it names (see
// Mailbox).
var EmailAddress = &Reader{Name: "email", Read: func(text string) ([]string, error) {
	m, err := Mailbox(text)
	if err != nil {
		return nil, err
	}
	return []string{m}, nil
}}

// Mailbox returns the mailbox an address names, as a cap counts it:
// without the white space around it and in lower case, so that a sender
// cannot reach a capped addressee by respelling her address ("Ann@Example.com",
// " ann@example.com"). Domains are case-blind (RFC 5321); a local part may
// in theory not be, but the mail services a gateway sends through deliver
// it case-blind, and two mailboxes told apart by case alone would at worst
// share a cap. A text without a local part and a domain around its last
// "@" is refused, as the services refuse it.
func Mailbox(addr string) (string, error) {
	a := TrimKey(addr)
	if at := strings.LastIndexByte(a, '@'); at <= 0 || at == len(a)-1 {
		return "", fmt.Errorf("%q is not an email address (local-part@domain)", addr)
	}
	return strings.ToLower(a), nil
}
