package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// commit.lua reads its keys CHUNK (4000) at a time. A write of more keys
// than that is still all or none: a key changed in a later chunk names
// that key and leaves every key as it was, and an unchanged set is
// written whole, deletes and checks included.
func TestCommitScriptAcrossChunks(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	const n = 9001 // three chunks, the last of one key
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("commit-test:%d", i)
		if i%2 == 0 {
			c.Set(ctx, names[i], "old", 0)
		}
	}
	args := func() []any {
		var a []any
		for i, k := range names {
			old := ""
			if i%2 == 0 {
				old = "old"
			}
			switch {
			case i%3 == 0:
				a = append(a, old, "", writeCheck)
			case i%5 == 0:
				a = append(a, old, "", writeDelete)
			default:
				a = append(a, old, "new-"+k, "60000")
			}
		}
		return a
	}

	c.Set(ctx, names[n-1], "changed", 0)
	changed, err := commitScript.Run(ctx, c, names, args()...).Int64()
	if err != nil || changed != n {
		t.Fatalf("commit over a key changed in the last chunk = %d, %v; want %d", changed, err, n)
	}
	if v := c.Get(ctx, names[1]).Val(); v != "" {
		t.Fatalf("a refused commit wrote %q to %s", v, names[1])
	}

	c.Set(ctx, names[n-1], "old", 0) // as read again
	if changed, err := commitScript.Run(ctx, c, names, args()...).Int64(); err != nil || changed != 0 {
		t.Fatalf("commit over unchanged keys = %d, %v; want 0", changed, err)
	}
	for _, i := range []int{0, 1, 10, 4001, 8000, n - 2} {
		got, want := c.Get(ctx, names[i]).Val(), map[bool]string{true: "old", false: ""}[i%2 == 0]
		switch {
		case i%3 == 0: // checked only
		case i%5 == 0:
			want = "" // deleted
		default:
			want = "new-" + names[i]
		}
		if got != want {
			t.Errorf("%s = %q after the commit; want %q", names[i], got, want)
		}
	}
}

// With components, commit.lua writes every component whose keys are all
// unchanged and names the first changed key of each other, across chunks
// too: 9,001 keys in three components (key i in component i mod 3), the
// last key (of component 0) changed: components 1 and 2 are written,
// component 0 is left whole, and the last key is named.
func TestCommitScriptByComponent(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	const n = 9001
	names := make([]string, n)
	var args []any
	var packed []byte
	for i := range names {
		names[i] = fmt.Sprintf("commit-components:%d", i)
		c.Set(ctx, names[i], "old", 0)
		args = append(args, "old", "new", "60000")
		packed = binary.LittleEndian.AppendUint32(packed, uint32(i%3))
	}
	args = append(args, packed)
	c.Set(ctx, names[n-1], "changed", 0)
	refused, err := commitScript.Run(ctx, c, names, args...).Int64Slice()
	if err != nil || len(refused) != 1 || refused[0] != n {
		t.Fatalf("commit by component = %v, %v; want key %d named (component 0 refused)", refused, err, n)
	}
	for _, i := range []int{0, 1, 2, 4000, 4001, 4002, 8999, n - 2, n - 1} {
		want := "new"
		switch {
		case i == n-1:
			want = "changed"
		case i%3 == 0:
			want = "old"
		}
		if got := c.Get(ctx, names[i]).Val(); got != want {
			t.Errorf("%s (component %d) = %q; want %q", names[i], i%3, got, want)
		}
	}

	for _, k := range names { // as read again
		c.Set(ctx, k, "old", 0)
	}
	if refused, err := commitScript.Run(ctx, c, names, args...).Int64Slice(); err != nil || len(refused) != 0 {
		t.Fatalf("commit by component over unchanged keys = %v, %v; want none refused", refused, err)
	}
	if got := c.Get(ctx, names[0]).Val(); got != "new" {
		t.Fatalf("%s = %q after the second commit; want %q", names[0], got, "new")
	}
}
