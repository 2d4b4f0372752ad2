package redisstore

import (
	"fmt"
	"unsafe"
)

// argRef is a command argument that go-redis writes without the string
// being copied or boxed: it points at a string that outlives the command
// (a batch key's name, the value read, the value to write and its TTL,
// which the batch keeps until its write is answered). A string put in a
// command's []any costs an allocation; a struct of one pointer does not,
// and a decision names and writes about five of them a key. go-redis
// writes it through encoding.BinaryMarshaler and names it (a cluster's
// routing by first key, an error message, a hook) through fmt.Stringer.
//
// The contract: a command holding argRefs is sent and answered before its
// batch is done (decidedInGo.done resets and pools the batch, whose
// buffers the next batch rewrites), and nothing keeps the command past
// that; go-redis writes a command's arguments on the caller's goroutine,
// retries and redirects included, before Process or Exec returns.
type argRef struct{ s *string }

// MarshalBinary is the string's bytes, not copied: go-redis writes them
// to the connection's buffer at once.
func (a argRef) MarshalBinary() ([]byte, error) {
	return unsafe.Slice(unsafe.StringData(*a.s), len(*a.s)), nil
}

func (a argRef) String() string { return *a.s }

// argText is the text of an argument made here: a string or an argRef
// (anything else, as fmt prints it).
func argText(a any) string {
	switch v := a.(type) {
	case argRef:
		return *v.s
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}
