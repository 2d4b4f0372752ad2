package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"
)

// launch runs redis-server with argv in dir (its log in dir/redis.log) and
// waits up to 5 s for ready to succeed. On failure it stops the process and
// returns an error quoting the log. The caller registers Stop as a cleanup.
func launch(path, dir, addr string, port int, argv []string, ready func() error) (*Server, error) {
	cmd := exec.Command(path, argv...)
	logf, err := os.Create(dir + "/redis.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, Port: port, Dir: dir, cmd: cmd}
	deadline := time.Now().Add(5 * time.Second)
	var lastErr error
	for time.Now().Before(deadline) {
		if lastErr = ready(); lastErr == nil {
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	log, _ := os.ReadFile(dir + "/redis.log")
	return nil, fmt.Errorf("%s on %s did not get ready (%v): %s", path, addr, lastErr, log)
}

// rawPing checks that addr answers PING with plain RESP (a server that
// wants a password, answering NOAUTH, is up too).
func rawPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return err
	}
	return ping(c)
}

// ping sends PING on c, checks the answer and closes c.
func ping(c net.Conn) error {
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	fmt.Fprint(c, "PING\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// baseArgs are the settings every test server shares: loopback only, no
// persistence, no delay before a replica's first sync.
func baseArgs(port int, dir string) []string {
	return []string{
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--protected-mode", "no", "--loglevel", "notice",
		"--repl-diskless-sync-delay", "0",
	}
}
