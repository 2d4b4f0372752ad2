package limiter

import (
	"context"
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
