package redisstore

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// This file tells a server that answered and said no (a refused login, a
// command or key the user may not use) from one that did not answer. The
// first is a configuration error that waiting will not mend; the second
// is an outage that on_error covers. Both are told by the error's type:
// go-redis returns what the server answered as a redis.Error (its
// *AuthError for WRONGPASS and NOAUTH, *PermissionError for NOPERM, a
// plain RedisError for the rest), and the code is the first word of that
// error's own message, never of a message that wraps it, which could
// quote anything. A Sentinel client that found no sentinel to ask returns
// "all sentinels ... are unreachable" wrapping errors.Join of each
// sentinel's error, so every error in the tree is looked at, not only the
// first.

// ErrLoginRefused is returned (wrapping ErrStore) when Redis refused the
// login: a wrong password or user (WRONGPASS), none where one is required
// (NOAUTH), or a user that is off. It lasts until the configuration or
// the server's users change.
var ErrLoginRefused = storeError("redis refused the login (wrong or missing username or password)")

// serverErrors returns the errors in err's tree that the server answered
// with, in order: errors.Unwrap and errors.Join's Unwrap() []error are
// both followed.
func serverErrors(err error) []redis.Error {
	var out []redis.Error
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if re, ok := e.(redis.Error); ok {
			out = append(out, re)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}

// LoginRefusal returns the server's refusal of the login in err's tree
// (WRONGPASS or NOAUTH), or nil.
func LoginRefusal(err error) error {
	for _, re := range serverErrors(err) {
		if loginRefused(re.Error()) {
			return re
		}
	}
	return nil
}

// loginRefused reports whether a server's own error message refuses the
// login. NOAUTH also answers a command sent before AUTH to a server that
// requires a password.
func loginRefused(msg string) bool {
	return strings.HasPrefix(msg, "WRONGPASS ") || strings.HasPrefix(msg, "NOAUTH ")
}

// IsLoginRefusal reports whether err holds the server's refusal of the
// login.
func IsLoginRefusal(err error) bool { return LoginRefusal(err) != nil }

// PermissionRefusal returns the refusal by the server's ACL in err's tree
// (a command or a key that is not the user's), or nil: NOPERM, or, for a
// call inside a script, "ACL failure in script" (Redis 7.2 on, Valkey) or
// Redis 7.0's sentence, both under the generic ERR code.
func PermissionRefusal(err error) error {
	for _, re := range serverErrors(err) {
		if permissionRefused(re.Error()) {
			return re
		}
	}
	return nil
}

func permissionRefused(msg string) bool {
	if strings.HasPrefix(msg, "NOPERM ") {
		return true
	}
	// A script's error carries its call's refusal after the code.
	msg, ok := strings.CutPrefix(msg, "ERR ")
	if !ok {
		return false
	}
	return strings.HasPrefix(msg, "ACL failure in script") || strings.HasPrefix(msg, "The user executing the script can't")
}

// IsPermissionRefusal reports whether err holds a refusal by the server's
// ACL.
func IsPermissionRefusal(err error) bool { return PermissionRefusal(err) != nil }

// IsRefusal reports whether err, as the store returns it, is a refusal
// that lasts until an operator acts: ErrLoginRefused or ErrNoPermission.
func IsRefusal(err error) bool {
	return errors.Is(err, ErrLoginRefused) || errors.Is(err, ErrNoPermission)
}
