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
		strings.Repeat("G", 64):    strings.Repeat("G", 64),
		"":                         "",
	} {
		if got := DeviceTokenKey(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
