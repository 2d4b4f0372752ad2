package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Every command that writes (the scripts, commit.lua, the native SET) goes
// to go-redis as a command it must never send twice. go-redis re-sends a
// command whose connection broke after it was sent, on a cluster even with
// retries off (its redirection budget serves for that too), and with it a
// node's whole pipeline after some refusals: a script that ran and whose
// reply was lost would run again, recording a send twice, or recording a
// send it then answered denied. NoRetry keeps every such command to one
// sending; MOVED and ASK, which say it did not run, are still followed. A
// write whose answer is lost fails the decisions it carried, to on_error:
// it may have been recorded (counted once, not twice), and nothing is
// decided on top of it.

// onceCmd is a command go-redis sends at most once. The reply lands in the
// command it wraps.
type onceCmd struct{ redis.Cmder }

// NoRetry implements redis.Cmder.
func (onceCmd) NoRetry() bool { return true }

// Unwrap returns the command wrapped, for a client hook that needs its
// concrete type (a *redis.StatusCmd for a native SET, a *redis.Cmd for a
// script).
func (c onceCmd) Unwrap() redis.Cmder { return c.Cmder }

// evalShaOnce queues EVALSHA of hash in pipe, to be sent once, and
// returns the command, whose reply is read once the pipeline has run.
func evalShaOnce(ctx context.Context, pipe redis.Pipeliner, hash string, keys []string, args ...any) *redis.Cmd {
	return scriptOnce(ctx, pipe, "evalsha", hash, keys, args)
}

// runOnce runs the script whose source is src and SHA1 is hash, as
// redis.Script.Run does (EVALSHA, then EVAL when the server does not hold
// it: NOSCRIPT means nothing ran), each sent once.
func runOnce(ctx context.Context, c pipeliner, hash, src string, keys []string, args ...any) *redis.Cmd {
	cmd := sendOnce(ctx, c, "evalsha", hash, keys, args)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = evalOnce(ctx, c, src, keys, args...)
	}
	return cmd
}

// evalOnce runs the script src with EVAL, sent once: after an EVALSHA
// answered NOSCRIPT.
func evalOnce(ctx context.Context, c pipeliner, src string, keys []string, args ...any) *redis.Cmd {
	return sendOnce(ctx, c, "eval", src, keys, args)
}

// sendOnce sends one script command, once, in a pipeline of its own: a
// Client need only offer pipelines, and on a cluster a pipeline's refusal
// (CLUSTERDOWN from a node the slot map still names) comes back to the
// store, which has the map reloaded (refusals.go).
func sendOnce(ctx context.Context, c pipeliner, verb, script string, keys []string, args []any) *redis.Cmd {
	var cmd *redis.Cmd
	_, _ = c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		cmd = scriptOnce(ctx, pipe, verb, script, keys, args)
		return nil
	})
	return cmd
}

// scriptOnce queues a script command in pipe, to be sent once.
func scriptOnce(ctx context.Context, pipe redis.Pipeliner, verb, script string, keys []string, args []any) *redis.Cmd {
	cmd := scriptCmd(ctx, verb, script, keys, args)
	_ = pipe.Process(ctx, onceCmd{cmd})
	return cmd
}

// scriptCmd is EVAL or EVALSHA of script over keys and args.
func scriptCmd(ctx context.Context, verb, script string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 3, 3+len(keys)+len(args))
	a[0], a[1], a[2] = verb, script, len(keys)
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // the cluster routes it by its first key
	}
	return cmd
}
