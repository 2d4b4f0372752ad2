// Package gosdk_test runs the providers' Go SDKs (sideshow/apns2 and
// firebase.google.com/go/v4 messaging) against a real Caddy with
// frequency_cap in front of the mocks of package conformance. It is a
// module of its own so that the SDKs never enter the main module's go.mod.
package gosdk_test

import (
	"os"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

func TestMain(m *testing.M) { os.Exit(conformance.Main(m)) }
