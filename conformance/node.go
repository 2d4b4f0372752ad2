package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireSDKs reports whether FREQCAP_REQUIRE_SDKS=1: then a missing
// toolchain (node, npm) fails the test instead of skipping it.
func RequireSDKs() bool { return os.Getenv("FREQCAP_REQUIRE_SDKS") == "1" }

// SkipOrFail skips the test saying why, or fails it under FREQCAP_REQUIRE_SDKS=1.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if RequireSDKs() {
		t.Fatalf("%s (FREQCAP_REQUIRE_SDKS=1: a skip is a failure)", msg)
	}
	t.Skipf("%s; set FREQCAP_REQUIRE_SDKS=1 to make this a failure", msg)
}

var nodeSetup struct {
	once    sync.Once
	node    string
	version string
	skip    string // why the Node tests cannot run here
	err     error  // why they fail
}

// NodeDir is conformance/node, where package.json pins the SDKs.
func NodeDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "conformance", "node"), nil
}

// RequireNode makes sure the Node SDKs can run: node on PATH and
// conformance/node/node_modules installed. When node_modules is missing, or
// older than package-lock.json, it runs `npm ci` there (once per test
// binary; npm must then be on PATH). Without node (or npm when it is
// needed) the test is skipped, or failed under FREQCAP_REQUIRE_SDKS=1.
func RequireNode(t testing.TB) {
	t.Helper()
	nodeSetup.once.Do(func() {
		node, err := exec.LookPath("node")
		if err != nil {
			nodeSetup.skip = "node is not on PATH (the Node SDK tests need node v20.18.1 or later, and npm to install conformance/node)"
			return
		}
		nodeSetup.node = node
		out, err := exec.Command(node, "--version").Output()
		if err != nil {
			nodeSetup.err = fmt.Errorf("node --version: %v", err)
			return
		}
		nodeSetup.version = strings.TrimSpace(string(out))
		if !versionAtLeast(nodeSetup.version, minNode) {
			nodeSetup.skip = fmt.Sprintf("node %s is too old: the pinned SDKs need %s or later (undici 7, which expo-server-sdk 7.2.0 uses, needs v20.18.1; expo-server-sdk itself declares >=22.12.0)", nodeSetup.version, minNode)
			return
		}
		dir, err := NodeDir()
		if err != nil {
			nodeSetup.err = err
			return
		}
		if !needsInstall(dir) {
			return
		}
		npm, err := exec.LookPath("npm")
		if err != nil {
			nodeSetup.skip = "conformance/node/node_modules is not installed and npm is not on PATH (install npm, or run npm ci in conformance/node)"
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeSetup.err = fmt.Errorf("npm ci in %s: %v\n%s", dir, err, tail(string(out), 3000))
		}
	})
	if nodeSetup.skip != "" {
		SkipOrFail(t, "%s", nodeSetup.skip)
	}
	if nodeSetup.err != nil {
		t.Fatal(nodeSetup.err)
	}
}

// minNode is the oldest node the pinned SDKs run on.
const minNode = "v20.18.1"

// versionAtLeast compares node versions ("v20.20.2").
func versionAtLeast(v, min string) bool {
	parse := func(s string) (n [3]int) {
		for i, p := range strings.SplitN(strings.TrimPrefix(s, "v"), ".", 3) {
			fmt.Sscanf(p, "%d", &n[i])
		}
		return n
	}
	a, b := parse(v), parse(min)
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return true
}

// needsInstall: node_modules is missing, or npm's record of what it
// installed (node_modules/.package-lock.json) is older than package-lock.json.
func needsInstall(dir string) bool {
	installed, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json"))
	if err != nil {
		return true
	}
	lock, err := os.Stat(filepath.Join(dir, "package-lock.json"))
	return err == nil && lock.ModTime().After(installed.ModTime())
}

// NodeVersion is the version of node (after RequireNode).
func NodeVersion() string { return nodeSetup.version }

// RunNode runs `node <script> <input as JSON>` in conformance/node with env
// added to the environment, and decodes its standard output (one JSON
// document) into out. The script's standard error is logged.
func RunNode(t testing.TB, script string, env []string, input, out any) {
	t.Helper()
	RequireNode(t)
	dir, err := NodeDir()
	if err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeSetup.node, script, string(in))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	if s := strings.TrimSpace(stderr.String()); s != "" {
		t.Logf("node %s (stderr):\n%s", script, tail(s, 4000))
	}
	if err != nil {
		t.Fatalf("node %s: %v (after %v)\nstdout:\n%s", script, err, time.Since(start).Round(time.Millisecond), tail(stdout.String(), 4000))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("node %s printed no JSON result (%v):\n%s", script, err, tail(stdout.String(), 4000))
	}
}
