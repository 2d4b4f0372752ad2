package reply

import (
	"go.uber.org/zap/zapcore"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// CheckValues is the dimension values of checks, as a log object.
type CheckValues []limiter.Check

// MarshalLogObject implements zapcore.ObjectMarshaler.
func (cv CheckValues) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	seen := make(map[string]bool)
	for _, c := range cv {
		for i, dim := range c.Rule.By {
			if !seen[dim] {
				seen[dim] = true
				enc.AddString(dim, c.Values[i])
			}
		}
	}
	return nil
}
