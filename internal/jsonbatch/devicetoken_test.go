package jsonbatch

import (
	"strings"
	"testing"
)

// An APNs token (64 or more hex digits) is counted in lower case, trimmed;
// an Expo token by ExponentPushToken[…] whichever prefix it has; anything
// else, FCM tokens and short hex included, as written.
func TestDeviceTokenKey(t *testing.T) {
	apns := strings.Repeat("ABCDEF0a", 8)
	fcm := "dGhpcyBpcyBub3QgYSByZWFsIHRva2Vu:APA91bE" + strings.Repeat("Xy_-", 30)
	for in, want := range map[string]string{
		apns:                           strings.ToLower(apns),
		" " + apns + "\u200b":          strings.ToLower(apns),
		strings.ToLower(apns):          strings.ToLower(apns),
		apns + apns:                    strings.ToLower(apns + apns),
		apns[:63]:                      apns[:63],
		fcm:                            fcm,
		"ExponentPushToken[AbCdEf012]": "ExponentPushToken[AbCdEf012]",
		// Expo's SDKs take either prefix for one token.
		"ExpoPushToken[AbCdEf012]": "ExponentPushToken[AbCdEf012]",
		"ExpoPushToken[AbCdEf012":  "ExpoPushToken[AbCdEf012",
		// White space around the prefix hides it from no one.
		" ExpoPushToken[AbCdEf012]\u200b": "ExponentPushToken[AbCdEf012]",
		strings.Repeat("G", 64):           strings.Repeat("G", 64),
		"":                                "",
	} {
		if got := DeviceTokenKey(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

// A token's key, trimmed as a keying value is, is its own key, and white
// space around the token changes nothing: no respelling of a counted token
// reads as a count of its own.
func FuzzDeviceTokenKey(f *testing.F) {
	for _, s := range []string{strings.Repeat("ABCDEF0a", 8), "ExpoPushToken[x]", " ExpoPushToken[x] ", "ExponentPushToken[x]", "fcm:token", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, token string) {
		key := TrimKey(DeviceTokenKey(token))
		if again := TrimKey(DeviceTokenKey(key)); again != key {
			t.Fatalf("%q counts as %q, whose own key is %q", token, key, again)
		}
		if spaced := TrimKey(DeviceTokenKey(" " + token + "\t")); spaced != key {
			t.Fatalf("%q counts as %q, with white space around it as %q", token, key, spaced)
		}
	})
}
