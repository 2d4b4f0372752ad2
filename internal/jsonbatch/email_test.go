package jsonbatch

import "testing"

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
	for _, in := range []string{"", " ", "ann", "@example.com", "ann@", " @ "} {
		if got, err := Mailbox(in); err == nil {
			t.Errorf("Mailbox(%q) = %q, want an error", in, got)
		}
	}
}
