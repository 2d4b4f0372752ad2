package caddymodule_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/lua"
)

// script_only in the redis block reaches the store: a batch send is then
// decided in freqcap.lua in one round trip, so Redis never sees the
// compare-and-set script that a batch decided in Go writes with; without it
// the batch is decided in Go and commit.lua is loaded (but on a server with
// SET … IFEQ, such as Valkey 8.1, which the batch writes with instead).
// Both count alike.
func TestScriptOnlyReachesTheStore(t *testing.T) {
	sum := sha1.Sum([]byte(lua.Commit))
	commitSHA := hex.EncodeToString(sum[:])
	for i, tc := range []struct {
		line       string
		commitUsed bool
	}{{"", true}, {"script_only", false}} {
		t.Run(fmt.Sprintf("%q", tc.line), func(t *testing.T) {
			name := fmt.Sprintf("script_only_%d", i)
			srv := redistest.Start(t) // a fresh script cache
			up := startUpstream(t)
			g := startGateway(t, fmt.Sprintf(`
	frequency_cap /send {
		name %s
		redis {
			address %s
			%s
		}
		key_prefix %s
		batch drop
		dimension recipient {json.*.to}
		rule hour {
			by     recipient
			limit  1
			window 1h
		}
	}
	reverse_proxy %s`, name, srv.Addr, tc.line, testPrefix(), up.addr()))
			batch := `[{"to": "ann"}, {"to": "bob"}, {"to": "ann"}]`
			expectStatus(t, g.post("/send", "application/json", batch), http.StatusOK)
			if u := usageOf(t, name, "recipient=ann"); u["hour"].Used != 1 {
				t.Errorf("ann counts %d, want 1 (her second entry dropped)", u["hour"].Used)
			}
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer c.Close()
			loaded, err := c.ScriptExists(context.Background(), commitSHA).Result()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.commitUsed && !redistest.HasSetIFEQ(t, c, "freqcap-probe")
			if loaded[0] != want {
				t.Errorf("commit.lua loaded: %v, want %v", loaded[0], want)
			}
		})
	}
}
