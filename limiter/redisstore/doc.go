// Package redisstore is the shared store: record logs kept in Redis
// (standalone, Sentinel or Cluster; Valkey alike), so that every gateway
// pointed at one Redis enforces the same caps exactly.
//
// It owns everything about talking to Redis: the client configuration
// (Config), the scripts' wire format, batching concurrent decisions into
// one read and one compare-and-set, the native SET IFEQ write where a node
// has it, cluster routing and reservations, hot keys, refusals retried,
// the start check and the reasons a call failed (Reason). Decisions made
// in Go run the engine's code (limiter.DecideOn over the values read);
// decisions made in lua/freqcap.lua run the same algorithm in the server.
//
// Its tests include the ones that hold every store to the same answers
// (memory against Redis, decided in Go and in the script), since they need
// both stores and a Redis server.
//
// A Store is safe for concurrent use; its zero value is not usable (call
// New), and Close releases what it holds (not the client, which the caller
// owns). Errors wrap limiter.ErrStore, limiter.ErrTimeout or
// limiter.ErrClockSkew; ErrOutOfMemory, ErrNoPermission and
// ErrLoginRefused (all also limiter.ErrStore) name the failures an
// operator must act on. A refused login or command is told by the type
// of the error the server answered with (acl.go), and Store.CheckStart
// with StartCheck.Refusals finds one before the first decision does.
package redisstore
