// Package conformance runs the providers' real SDKs through a real Caddy
// with frequency_cap: mocks of the providers (Expo, SendGrid, Twilio, a
// Web Push service, APNs, FCM v1, gorush) speaking their wire protocols,
// a launcher that builds Caddy from ./cmd/caddy and runs it with a
// Caddyfile on free ports, a throwaway CA for the TLS sites, the runner of
// the Node SDK drivers in node/, and the environment that intercepts a
// driver's egress to a provider's own host name (EgressEnv), for SDKs that
// cannot be given another host. Its own tests drive the Node
// SDKs, and gorush's own request and answer types (copied into package
// gorush, as gorush has no client SDK); the Go SDKs are tested in the
// gosdk module. See README.md.
//
// It uses the standard library only, so it adds nothing to the module's
// go.mod.
package conformance
