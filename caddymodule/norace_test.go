//go:build !race

package caddymodule_test

// raceBuild reports that the tests run with the race detector.
const raceBuild = false
