package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/redis/go-redis/v9"
)

// serverBin is the server binary the designs start: -server, else
// FREQCAP_REDIS_SERVER (as the tests take it), else redis-server.
var serverBin = func() string {
	if bin := os.Getenv("FREQCAP_REDIS_SERVER"); bin != "" {
		return bin
	}
	return "redis-server"
}()

// serverVersion is what serverBin says of itself, for the tables to name
// the server every figure comes from.
func serverVersion() string {
	out, err := exec.Command(serverBin, "--version").Output()
	if err != nil {
		return serverBin + " (no version: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(out))
}

// hasIFEQ reports whether the server runs SET … IFEQ (Valkey 8.1, Redis
// 8.4): a server without it refuses the syntax.
func hasIFEQ(ctx context.Context, c *redis.Client) (bool, error) {
	err := c.Do(ctx, "SET", "redisbench:ifeq-probe", "x", "IFEQ", "x").Err()
	switch {
	case err == nil || err == redis.Nil:
		return true, nil
	case strings.Contains(err.Error(), "syntax error"):
		return false, nil
	}
	return false, err
}

// ifeqPrimitive is the native compare-and-set of the store's writes on a
// server with SET … IFEQ: an MGET, then SET key value IFEQ old PX ttl for
// each key, pipelined. The values are unchanged, so every compare
// succeeds and every key is written, as in the floor.
func ifeqPrimitive() primitive {
	return primitive{"compare-and-set by SET … IFEQ … PX, pipelined, after an MGET (this store's native write)", func(ctx context.Context, c *redis.Client, keys []string) error {
		if err := c.MGet(ctx, keys...).Err(); err != nil {
			return err
		}
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range keys {
				p.Do(ctx, "SET", k, primitiveValue, "IFEQ", primitiveValue, "PX", primitiveTTL)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i, cmd := range cmds {
			if cmd.Err() != nil {
				return fmt.Errorf("SET … IFEQ of %s: %v", keys[i], cmd.Err())
			}
		}
		return nil
	}}
}
