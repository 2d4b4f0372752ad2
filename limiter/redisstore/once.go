package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// On a cluster, every command that writes (freqcap.lua, and the native SET
// of batch sends decided in Go) goes to go-redis as a command it must
// never send twice. A cluster client re-sends a command whose connection
// broke after it was sent even with retries off (its redirection budget
// serves for that), and with it a node's whole pipeline after some
// refusals: a script that ran and whose reply was lost would run again,
// recording a send twice, or recording a send it then answered denied.
// NoRetry keeps each such command to one sending; MOVED and ASK, which
// say it did not run, are still followed. A write whose answer is lost
// fails the decisions it carried, to on_error: it may have been recorded
// (counted once, not twice), and nothing is decided on top of it.
//
// Off a cluster (standalone, Sentinel) go-redis sends a command once
// already: failFast turns its retries off. Those commands go as they are,
// on go-redis's usual paths.

// onceCmd is a command go-redis sends at most once. The reply lands in the
// command it wraps.
type onceCmd struct{ redis.Cmder }

// NoRetry implements redis.Cmder.
func (onceCmd) NoRetry() bool { return true }

// Unwrap returns the command wrapped, for a client hook that needs its
// concrete type (a *redis.StatusCmd for a native SET, a *redis.Cmd for a
// script).
func (c onceCmd) Unwrap() redis.Cmder { return c.Cmder }

// sent is cmd as it goes to go-redis: wrapped on a cluster (see above).
func sent(cmd redis.Cmder, cluster bool) redis.Cmder {
	if cluster {
		return onceCmd{cmd}
	}
	return cmd
}

// evalShaIn queues EVALSHA of hash in pipe and returns the command, whose
// reply is read once the pipeline has run.
func (s *Store) evalShaIn(ctx context.Context, pipe redis.Pipeliner, hash string, keys []string, args ...any) *redis.Cmd {
	cmd := scriptCmd(ctx, "evalsha", hash, keys, args)
	_ = pipe.Process(ctx, sent(cmd, s.cluster))
	return cmd
}

// runScript runs the script whose source is src and SHA1 is hash, as
// redis.Script.Run does: EVALSHA, then EVAL when the server does not hold
// it (NOSCRIPT means nothing ran).
func (s *Store) runScript(ctx context.Context, hash, src string, keys []string, args ...any) *redis.Cmd {
	cmd := s.sendScript(ctx, "evalsha", hash, keys, args)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = s.evalScript(ctx, src, keys, args...)
	}
	return cmd
}

// evalScript runs the script src with EVAL: after an EVALSHA answered
// NOSCRIPT.
func (s *Store) evalScript(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return s.sendScript(ctx, "eval", src, keys, args)
}

// processer is a client that sends one command by itself.
type processer interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// sendScript sends one script command. Off a cluster it goes by itself, as
// redis.Script.Run sends it (the Sentinel client follows a failover on
// that path). On a cluster, and for a Client that offers only pipelines,
// it goes in a pipeline of its own, sent once: a cluster pipeline's
// refusal (CLUSTERDOWN from a node the slot map still names) comes back to
// the store, which has the map reloaded (refusals.go).
func (s *Store) sendScript(ctx context.Context, verb, script string, keys []string, args []any) *redis.Cmd {
	cmd := scriptCmd(ctx, verb, script, keys, args)
	if p, ok := s.client.(processer); ok && !s.cluster {
		_ = p.Process(ctx, cmd)
		return cmd
	}
	sendAlone(ctx, s.client, cmd, s.cluster)
	return cmd
}

// sendAlone sends cmd on client in a pipeline of its own; on a cluster
// (the cluster client, or a master's own) sent once.
func sendAlone(ctx context.Context, client pipeliner, cmd redis.Cmder, cluster bool) {
	_, _ = client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		return pipe.Process(ctx, sent(cmd, cluster))
	})
}

// scriptCmd is EVAL or EVALSHA of script over keys and args.
func scriptCmd(ctx context.Context, verb, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 3, 3+len(keys)+len(args))
	a[0], a[1], a[2] = verb, script, len(keys)
	for i := range keys {
		a = append(a, argRef{&keys[i]}) // callers keep keys unchanged until the command is answered
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // the cluster routes it by its first key
	}
	return cmd
}
