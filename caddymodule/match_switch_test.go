package caddymodule

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestMatchesEverythingWarned proves that an exempt or skip on a constant
// placeholder (a switch per deployment, which loads) is a warning at
// start where it matches, naming what it does: a probe's skip on
// {env.FC_EXEMPT} passed every send uncapped with nothing logged. Where it
// does not match, or where the placeholder reads the request, nothing is
// logged.
func TestMatchesEverythingWarned(t *testing.T) {
	t.Setenv("FREQCAP_TEST_SWITCH", "yes")
	for _, c := range []struct {
		name       string
		exempt     *ExemptConfig
		skip       *ExemptConfig
		warnedOf   string
		warnedWhat string
	}{
		{"skip on", nil, &ExemptConfig{Placeholder: "{env.FREQCAP_TEST_SWITCH}", Values: []string{"yes"}}, "skip", "{env.FREQCAP_TEST_SWITCH}"},
		{"exempt on", &ExemptConfig{Placeholder: "{env.FREQCAP_TEST_SWITCH}", Values: []string{"yes"}}, nil, "exempt", "{env.FREQCAP_TEST_SWITCH}"},
		{"skip off", nil, &ExemptConfig{Placeholder: "{env.FREQCAP_TEST_SWITCH}", Values: []string{"no"}}, "", ""},
		{"skip reading the request", nil, &ExemptConfig{Placeholder: "{json.validate_only}", Values: []string{"yes"}}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			h := &Handler{Name: "push", Exempt: c.exempt, Skip: c.skip, logger: zap.New(core)}
			var err error
			if h.exempt, err = compileMatch("exempt", c.exempt); err != nil {
				t.Fatal(err)
			}
			if h.skip, err = compileMatch("skip", c.skip); err != nil {
				t.Fatal(err)
			}
			h.warnMatchesEverything()
			lines := logs.All()
			if c.warnedOf == "" {
				if len(lines) != 0 {
					t.Fatalf("logged %v, want nothing", lines)
				}
				return
			}
			if len(lines) != 1 || lines[0].Level != zapcore.WarnLevel {
				t.Fatalf("logged %v, want one warning", lines)
			}
			if f := lines[0].ContextMap(); f[c.warnedOf] != c.warnedWhat || f["value"] != "yes" || f["handler"] != "push" || f["effect"] == nil {
				t.Fatalf("fields %v", f)
			}
		})
	}
}
