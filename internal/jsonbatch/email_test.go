package jsonbatch

import (
	"slices"
	"strings"
	"testing"
)

// One mailbox however its address is spelt in case and white space;
// texts that are no address are refused.
func TestMailbox(t *testing.T) {
	for _, in := range []string{"ann@example.com", "Ann@Example.COM", " ann@example.com\t", "ANN@EXAMPLE.COM"} {
		if got, err := Mailbox(in); err != nil || got != "ann@example.com" {
			t.Errorf("Mailbox(%q) = %q, %v, want ann@example.com", in, got, err)
		}
	}
	if got, _ := Mailbox(`"a@b"@Example.com`); got != `"a@b"@example.com` {
		t.Errorf("a quoted local part with an @: %q", got)
	}
	// One domain however written: a root dot, Unicode or ASCII; a local
	// part quoted for nothing.
	for _, in := range []string{"ann@example.com.", `"ann"@example.com`, `"Ann"@EXAMPLE.com.`, "ann@example.com。", "ann@example．com"} {
		if got, err := Mailbox(in); err != nil || got != "ann@example.com" {
			t.Errorf("Mailbox(%q) = %q, %v, want ann@example.com", in, got, err)
		}
	}
	for _, in := range []string{"u@exämple.com", "u@xn--exmple-cua.com", "u@EXÄMPLE.com."} {
		if got, err := Mailbox(in); err != nil || got != "u@xn--exmple-cua.com" {
			t.Errorf("Mailbox(%q) = %q, %v, want u@xn--exmple-cua.com", in, got, err)
		}
	}
	if got, _ := Mailbox(`"a b"@example.com`); got != `"a b"@example.com` {
		t.Errorf("a local part that needs its quotes: %q", got)
	}
	// A domain with a character no domain holds is no mailbox: "l@x>." is
	// not l@x> (which would read back as an unclosed angle address).
	for _, in := range []string{"", " ", "ann", "@example.com", "ann@", " @ ", "ann@.", "l@x\x90o>.", "l@x>", "ann@exa mple.com", "ann@x;y.com", "ann@x\x00.com"} {
		if got, err := Mailbox(in); err == nil {
			t.Errorf("Mailbox(%q) = %q, want an error", in, got)
		}
	}
}

// Mailbox names one mailbox for every spelling it folds: the white space
// around an address and its case change nothing, and a mailbox is its own
// mailbox, so no respelling of a capped address reads as another.
func FuzzMailbox(f *testing.F) {
	for _, s := range []string{"ann@example.com", " Ann@Example.COM\t", "a@b", `"x@y"@Z.org`, "@", "ann", "Ǆ@ǅ.ǆ", "İ@example.com", "u@EXÄMPLE.com.", `"ann"@x.org`, "u@xn--exmple-cua.com", "u@example.com。", "u@example.com．"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		m, err := Mailbox(addr)
		if err != nil {
			if _, err2 := Mailbox(" " + addr + "\n"); err2 == nil {
				t.Fatalf("%q refused, but accepted with white space around it", addr)
			}
			return
		}
		if again, err := Mailbox(m); err != nil || again != m {
			t.Fatalf("Mailbox(%q) = %q, whose own mailbox is %q (%v)", addr, m, again, err)
		}
		if spaced, err := Mailbox(" " + addr + " "); err != nil || spaced != m {
			t.Fatalf("%q with spaces around it is %q (%v), want %q", addr, spaced, err, m)
		}
		if lower, err := Mailbox(strings.ToLower(addr)); err != nil || lower != m {
			t.Fatalf("%q in lower case is %q (%v), want %q", addr, lower, err, m)
		}
	})
}

// A display name or a list names its addresses' mailboxes, each once:
// before, "Bob <carol@x.com>" was a mailbox of its own, so a mail API
// that reads RFC 5322 addresses delivered to carol past her cap.
func TestMailboxes(t *testing.T) {
	for in, want := range map[string][]string{
		"Carol@X.com":                            {"carol@x.com"},
		"Bob <Carol@X.com>":                      {"carol@x.com"},
		`"Bob, Jr" <bob@x.com>`:                  {"bob@x.com"},
		"<carol@x.com>":                          {"carol@x.com"},
		"carol@x.com, Carol@X.com":               {"carol@x.com"},
		"ann@x.com, Bob <bob@x.com>":             {"ann@x.com", "bob@x.com"},
		`"a,b"@x.com`:                            {`"a,b"@x.com`},
		`Ann <"a b"@x.com>`:                      {`"a b"@x.com`},
		"team: ann@x.com, bob@x.com;":            {"ann@x.com", "bob@x.com"},
		"Ann <ann@exämple.com>, ann@exämple.com": {"ann@xn--exmple-cua.com"},
		"jörg@x.com":                             {"jörg@x.com"},
		"carol@x.com (Carol)":                    {"carol@x.com"},
		"carol@x.com (anything else)":            {"carol@x.com"},
		`"jörg"@x.com`:                           {"jörg@x.com"},
		"Jörg <jörg@x.com>, \"jörg\"@x.com":      {"jörg@x.com"},
	} {
		got, err := Mailboxes(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Mailboxes(%q) = %q, %v, want %q", in, got, err, want)
		}
		for _, m := range got {
			if again, err := Mailboxes(m); err != nil || !slices.Equal(again, []string{m}) {
				t.Errorf("%q's mailbox %q reads back as %q, %v", in, m, again, err)
			}
		}
	}
	for _, in := range []string{"Bob <carol>", "a@b>", "Bob <>", "ann@x.com, carol"} {
		if got, err := Mailboxes(in); err == nil {
			t.Errorf("Mailboxes(%q) = %q, want an error", in, got)
		}
	}
}

// Every mailbox Mailboxes names reads back as itself alone, so no
// respelling of what it counts reads as another count.
func FuzzMailboxes(f *testing.F) {
	for _, s := range []string{"Bob <carol@x.com>", "a@x, b@x", `"a,b"@x.com`, `Ann <"a b"@x.com>`, "g: a@b;", `"a<b"@x.com`, "x@y (c)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, err := Mailboxes(text)
		if err != nil {
			return
		}
		for _, m := range got {
			if again, err := Mailboxes(m); err != nil || !slices.Equal(again, []string{m}) {
				t.Fatalf("Mailboxes(%q) names %q, which reads back as %q (%v)", text, m, again, err)
			}
		}
	})
}
