package redisstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// serverErr is an error as go-redis returns what the server answered: a
// redis.Error.
type serverErr string

func (e serverErr) Error() string { return string(e) }
func (serverErr) RedisError()     {}

// A refusal is told by the type of the error the server answered with and
// that error's own code, wherever it sits in the tree (wrapped, or one of
// a Sentinel client's joined errors), never by the text of a message that
// wraps or quotes it.
func TestRefusalsByType(t *testing.T) {
	const wrongpass = "WRONGPASS invalid username-password pair or user is disabled."
	dial := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	sentinels := func(errs ...error) error {
		return fmt.Errorf("redis: all sentinels specified in configuration are unreachable: %w", errors.Join(errs...))
	}
	for _, c := range []struct {
		name        string
		err         error
		login, perm bool
	}{
		{"wrongpass", serverErr(wrongpass), true, false},
		{"noauth", serverErr("NOAUTH Authentication required."), true, false},
		{"wrapped by go-redis's AUTH fallback", fmt.Errorf("failed to authenticate: %w", serverErr(wrongpass)), true, false},
		{"one sentinel of two refusing", sentinels(dial, serverErr("NOAUTH HELLO must be called with the client already authenticated")), true, false},
		{"every sentinel down", sentinels(dial, dial), false, false},
		{"noperm", serverErr("NOPERM User gw has no permissions to run the 'evalsha' command"), false, true},
		{"noperm on a key", serverErr("NOPERM No permissions to access a key"), false, true},
		{"in a script, redis 7.2 on", serverErr("ERR ACL failure in script: User gw has no permissions to run the 'set' command script: 6b, on @user_script:1."), false, true},
		{"in a script, redis 7.0", serverErr("ERR The user executing the script can't run this command or subcommand script: 6b, on @user_script:1."), false, true},
		{"joined noperm", errors.Join(dial, serverErr("NOPERM No permissions to access a key")), false, true},
		// The text of a message is not a server's answer.
		{"text only", errors.New(wrongpass), false, false},
		{"quoted as text", fmt.Errorf("store failed: %v", serverErr(wrongpass)), false, false},
		{"noperm as text", errors.New("frequency cap store failed: NOPERM No permissions to access a key"), false, false},
		{"other server errors", serverErr("NOSCRIPT No matching script. Please use EVAL."), false, false},
		{"an ERR that is not the ACL's", serverErr("ERR no permissions to run the 'incr' command"), false, false},
		{"oom", serverErr("OOM command not allowed when used memory > 'maxmemory'."), false, false},
		{"nil", nil, false, false},
	} {
		if got := IsLoginRefusal(c.err); got != c.login {
			t.Errorf("%s: IsLoginRefusal = %v, want %v", c.name, got, c.login)
		}
		if got := IsPermissionRefusal(c.err); got != c.perm {
			t.Errorf("%s: IsPermissionRefusal = %v, want %v", c.name, got, c.perm)
		}
		// classify keeps the verdict as a sentinel error, for Reason.
		if c.err == nil {
			continue
		}
		cl := classify(c.err)
		if errors.Is(cl, ErrLoginRefused) != c.login || errors.Is(cl, ErrNoPermission) != c.perm || !errors.Is(cl, limiter.ErrStore) {
			t.Errorf("%s: classify = %v", c.name, cl)
		}
		if want := c.login || c.perm; IsRefusal(cl) != want || (Reason(cl) == ReasonPermission) != want {
			t.Errorf("%s: IsRefusal %v, Reason %q; want a refusal: %v", c.name, IsRefusal(cl), Reason(cl), want)
		}
	}
}
