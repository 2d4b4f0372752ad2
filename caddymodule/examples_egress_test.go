package caddymodule_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"

	// The example names the h2_scheme listener wrapper.
	_ "github.com/freqcap/caddy-freqcap/caddymodule/h2scheme"
)

func init() { exampleTests["egress-interception"] = testEgressInterception }

// testEgressInterception checks the example as Caddy adapts it (running it
// takes port 443 and the providers' real hosts; the SDKs through such a
// gateway are conformance's TestFirebaseAdminSDK and
// TestNodePushNotifications): every server has the h2_scheme listener
// wrapper; each provider's name has a site whose handlers, in order,
// refuse a request that carries the Freqcap-Egress marker (508) before
// frequency_cap counts it, cap with the provider's answer style, and pass
// the rest to that same name by its A records from resolvers named in the
// file (never the system's, which may resolve the name to the gateway),
// with the name as SNI and the marker set.
func testEgressInterception(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	adapted, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(data, map[string]any{"filename": path})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					ListenerWrappers []map[string]any `json:"listener_wrappers"`
					Routes           []egressRoute    `json:"routes"`
				} `json:"servers"`
			} `json:"http"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(adapted, &cfg); err != nil {
		t.Fatal(err)
	}
	answers := map[string]string{"fcm.googleapis.com": "fcm", "api.push.apple.com": "apns", "exp.host": "expo"}
	seen := map[string]bool{}
	for name, srv := range cfg.Apps.HTTP.Servers {
		if !slices.ContainsFunc(srv.ListenerWrappers, func(w map[string]any) bool { return w["wrapper"] == "h2_scheme" }) {
			t.Errorf("server %s has no h2_scheme listener wrapper: %v", name, srv.ListenerWrappers)
		}
		for _, r := range srv.Routes {
			for _, m := range r.Match {
				for _, host := range m.Host {
					seen[host] = true
					style, ok := answers[host]
					if !ok {
						t.Errorf("a site for %s, which the example does not describe", host)
						continue
					}
					checkEgressSite(t, host, style, flattenHandlers(r.Handle))
				}
			}
		}
	}
	for host := range answers {
		if !seen[host] {
			t.Errorf("no site for %s", host)
		}
	}
}

type egressRoute struct {
	Match []struct {
		Host   []string            `json:"host"`
		Header map[string][]string `json:"header"`
	} `json:"match"`
	Handle []json.RawMessage `json:"handle"`
}

// egressStep is a handler in the order a request meets it, with the
// header matchers of the route it is in.
type egressStep struct {
	handler map[string]any
	header  map[string][]string
}

// flattenHandlers lists the handlers of nested subroutes in order.
func flattenHandlers(handle []json.RawMessage) []egressStep {
	var steps []egressStep
	for _, raw := range handle {
		var h map[string]any
		json.Unmarshal(raw, &h)
		if h["handler"] != "subroute" {
			steps = append(steps, egressStep{handler: h})
			continue
		}
		var sub struct {
			Routes []egressRoute `json:"routes"`
		}
		json.Unmarshal(raw, &sub)
		for _, r := range sub.Routes {
			inner := flattenHandlers(r.Handle)
			for i := range inner {
				for _, m := range r.Match {
					if m.Header != nil {
						inner[i].header = m.Header
					}
				}
			}
			steps = append(steps, inner...)
		}
	}
	return steps
}

func checkEgressSite(t *testing.T, host, style string, steps []egressStep) {
	t.Helper()
	var kinds []string
	for _, s := range steps {
		kinds = append(kinds, s.handler["handler"].(string))
	}
	if !slices.Equal(kinds, []string{"static_response", "frequency_cap", "reverse_proxy"}) {
		t.Fatalf("%s: handlers %v, want the loop check, frequency_cap and reverse_proxy in that order", host, kinds)
	}
	if loop := steps[0]; loop.handler["status_code"] != "508" && loop.handler["status_code"] != float64(508) || loop.header["Freqcap-Egress"] == nil {
		t.Errorf("%s: the first handler %v (matching headers %v), want 508 for a request with Freqcap-Egress", host, loop.handler, loop.header)
	}
	if got := steps[1].handler["answer"]; got != style {
		t.Errorf("%s: answer %v, want %s", host, got, style)
	}
	// APNs delivers /3/device/ABCD… to abcd…'s device: a token counted as
	// spelt would give each case spelling a cap of its own.
	if dims, _ := steps[1].handler["dimensions"].(map[string]any); style == "apns" && dims["recipient"] != "{lower.http.request.uri.path.2}" {
		t.Errorf("%s: recipient %v, want the token case-blind, {lower.http.request.uri.path.2}", host, dims["recipient"])
	}
	rp, _ := json.Marshal(steps[2].handler)
	var proxy struct {
		Dynamic struct {
			Source   string `json:"source"`
			Name     string `json:"name"`
			Port     string `json:"port"`
			Resolver struct {
				Addresses []string `json:"addresses"`
			} `json:"resolver"`
		} `json:"dynamic_upstreams"`
		Headers struct {
			Request struct {
				Set map[string][]string `json:"set"`
			} `json:"request"`
		} `json:"headers"`
		Transport struct {
			TLS *struct {
				ServerName string `json:"server_name"`
			} `json:"tls"`
		} `json:"transport"`
	}
	json.Unmarshal(rp, &proxy)
	d := proxy.Dynamic
	if d.Source != "a" || d.Name != host || d.Port != "443" || len(d.Resolver.Addresses) == 0 {
		t.Errorf("%s: upstreams %+v, want the A records of %s from resolvers named in the file, port 443", host, d, host)
	}
	if proxy.Transport.TLS == nil || proxy.Transport.TLS.ServerName != host {
		t.Errorf("%s: transport TLS %+v, want TLS with server name %s", host, proxy.Transport.TLS, host)
	}
	if proxy.Headers.Request.Set["Freqcap-Egress"] == nil {
		t.Errorf("%s: the upstream request does not carry Freqcap-Egress, so a loop would not be seen", host)
	}
}
