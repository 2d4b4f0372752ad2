package jsonbatch

import "strings"

// DeviceToken reads a device token field as the token a cap counts (see
// DeviceTokenKey).
var DeviceToken = &Reader{Name: "device_token", Read: func(text string) ([]string, error) {
	return []string{DeviceTokenKey(text)}, nil
}}

// An Expo push token is ExponentPushToken[<id>], and Expo's SDKs take
// ExpoPushToken[<id>] as the same token: counted as the first, so that
// the prefix a sender picks is no cap of its own.
const (
	expoPrefix    = "ExponentPushToken["
	expoAltPrefix = "ExpoPushToken["
)

// apnsTokenMinHex is the shortest APNs device token in hex: 32 bytes.
// Apple may lengthen them, never shorten them.
const apnsTokenMinHex = 64

// DeviceTokenKey returns a device token as a cap counts it: an APNs
// token (64 or more hex digits, white space around them trimmed) in lower
// case, since APNs delivers ABCDEF0A… to the device of abcdef0a… and
// senders spell it either way (Safari's tokens come upper-cased); an
// ExpoPushToken[<id>] as ExponentPushToken[<id>] (see expoPrefix), white
// space around it trimmed (else " ExpoPushToken[x]", trimmed later as
// every keying value is, would be a count apart from the token's); any
// other text as written, FCM, HMS and Expo tokens being case-sensitive
// and never all hex this long, and a topic name this long and all hex
// being no topic anyone names.
func DeviceTokenKey(text string) string {
	t := TrimKey(text) // as a keying value is trimmed, before its prefix is read
	if id, ok := strings.CutPrefix(t, expoAltPrefix); ok && strings.HasSuffix(id, "]") {
		return expoPrefix + id
	}
	if len(t) < apnsTokenMinHex {
		return text
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return text
		}
	}
	return strings.ToLower(t)
}
