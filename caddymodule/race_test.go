//go:build race

package caddymodule

// raceBuild reports that the tests run with the race detector.
const raceBuild = true
