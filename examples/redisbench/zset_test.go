package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestZset4CountsLikeTheStore proves that the baseline admits as many sends
// as the store on the benchmark's data set, so that the side-by-side figures
// compare two designs doing the same work. On the simulated clock a short
// window's expiry lies in Redis's past: PEXPIREAT once deleted each such set
// as it was written, and seed 002 admitted every send. The first 1,300
// recipients of the data set hold sends the same-content rule must deny.
// The pipelined variant records a send in the rules that admit it even
// when another denies, which on this data set changes no count; it runs
// here for its EVALSHA, which a pipeline does not retry as EVAL.
func TestZset4CountsLikeTheStore(t *testing.T) {
	srv := redistest.Start(t) // measure flushes its Redis: never REDIS_URL's
	const recipients = 1300
	data := makeData(recipients, 20, 5)
	admitted := map[string]int64{}
	for _, design := range []string{"zset4", "zset4-pipelined", "freqcap"} {
		r, err := measure(design, data, recipients, 4, "", srv.Addr, 0)
		if err != nil {
			t.Fatalf("%s: %v", design, err)
		}
		admitted[design] = r.admitted
	}
	if admitted["freqcap"] == int64(len(data)) {
		t.Fatalf("the store admitted all %d sends: the data set no longer tests a denial", len(data))
	}
	for _, design := range []string{"zset4", "zset4-pipelined"} {
		if admitted[design] != admitted["freqcap"] {
			t.Fatalf("%s admitted %d sends, the store %d, of %d", design, admitted[design], admitted["freqcap"], len(data))
		}
	}
}

// TestZsetExpireFollowsTheSimulatedClock proves that at the end of the
// simulated day zsetExpire deletes exactly the sets whose expiry on that
// clock has passed (an expiry at the end itself included, as the script's
// window excludes a send exactly one window old), keeps a set without
// expiry, and that no set expired on Redis's own clock before, not even one
// written at the start of the day.
func TestZsetExpireFollowsTheSimulatedClock(t *testing.T) {
	srv := redistest.Start(t) // the test counts every key: never REDIS_URL's
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	ctx := context.Background()
	if err := zsetScript.Load(ctx, client).Err(); err != nil {
		t.Fatal(err)
	}
	decide := zsetDecider(client, false)
	end := time.Now().Add(-time.Hour).Truncate(time.Second) // a simulated end in Redis's past
	for _, s := range []struct {
		send send
		at   time.Time
	}{
		{send{recipient: 1}, end.Add(-2 * time.Hour)},    // only its day set outlives the end
		{send{recipient: 2}, end.Add(-30 * time.Second)}, // all four sets outlive it
		{send{recipient: 3}, end.Add(-24 * time.Hour)},   // its day set expires at the end itself
	} {
		if ok, err := decide(ctx, s.send, s.at); err != nil || !ok {
			t.Fatalf("send %+v: admitted %v, %v", s, ok, err)
		}
	}
	if n := client.DBSize(ctx).Val(); n != 12 {
		t.Fatalf("%d sets before zsetExpire, want 12: one expired on Redis's clock", n)
	}
	if err := client.ZAdd(ctx, "zs:{u9}:recipient_day", redis.Z{Score: 1, Member: "no expiry"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := zsetExpire(ctx, client, end); err != nil {
		t.Fatal(err)
	}
	left := client.Keys(ctx, "*").Val()
	slices.Sort(left)
	c := contentHash(0)
	want := []string{
		"zs:{u1}:recipient_day",
		"zs:{u2}:recipient_day",
		"zs:{u2}:recipient_minute",
		"zs:{u2}:same_content_59m:" + c,
		"zs:{u2}:same_content_59s:" + c,
		"zs:{u9}:recipient_day",
	}
	if !slices.Equal(left, want) {
		t.Fatalf("sets left at the end:\n got %q\nwant %q", left, want)
	}
}
