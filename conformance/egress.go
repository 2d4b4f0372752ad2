package conformance

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// EgressEnv is the environment for RunNode that intercepts a Node driver's
// egress to providers' own host names, for SDKs that cannot be given
// another host (firebase-admin's FCM_SEND_HOST is a constant): routes maps
// "host:port" (say "fcm.googleapis.com:443") to the port on 127.0.0.1 where
// a gateway answers for that host with a certificate from the CA in
// caFile. It preloads node/intercept.mjs (NODE_OPTIONS=--import), which
// resolves the routed names to 127.0.0.1, fails every other name, and
// moves the routed ports, in that process only; and it makes the CA
// trusted (NODE_EXTRA_CA_CERTS), so the SDK verifies the gateway's
// certificate for the provider's name as it would Google's or Apple's.
func EgressEnv(caFile string, routes map[string]int) ([]string, error) {
	dir, err := NodeDir()
	if err != nil {
		return nil, err
	}
	var entries []string
	for hostPort, port := range routes {
		entries = append(entries, fmt.Sprintf("%s=%d", hostPort, port))
	}
	sort.Strings(entries)
	// NODE_OPTIONS takes a quoted value, with \ and " escaped in it.
	quote := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	preload := `--import="` + quote.Replace(filepath.Join(dir, "intercept.mjs")) + `"`
	if prev := os.Getenv("NODE_OPTIONS"); prev != "" {
		preload = prev + " " + preload
	}
	return []string{
		"NODE_OPTIONS=" + preload,
		"FREQCAP_EGRESS=" + strings.Join(entries, ","),
		"NODE_EXTRA_CA_CERTS=" + caFile,
	}, nil
}
