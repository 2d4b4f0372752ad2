package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestZset4CountsLikeTheStore proves that the baseline admits as many sends
// as the store on the benchmark's data set, so that the side-by-side figures
// compare two designs doing the same work. On the simulated clock a short
// window's expiry lies in Redis's past: PEXPIREAT once deleted each such set
// as it was written, and seed 002 admitted every send. The first 1,300
// recipients of the data set hold sends the same-content rule must deny.
func TestZset4CountsLikeTheStore(t *testing.T) {
	srv := redistest.Start(t) // measure flushes its Redis: never REDIS_URL's
	const recipients = 1300
	data := makeData(recipients, 20, 5)
	admitted := map[string]int64{}
	for _, design := range []string{"zset4", "freqcap"} {
		r, err := measure(design, data, recipients, 4, "", srv.Addr, 0)
		if err != nil {
			t.Fatalf("%s: %v", design, err)
		}
		admitted[design] = r.admitted
	}
	if admitted["freqcap"] == int64(len(data)) {
		t.Fatalf("the store admitted all %d sends: the data set no longer tests a denial", len(data))
	}
	if admitted["zset4"] != admitted["freqcap"] {
		t.Fatalf("zset4 admitted %d sends, the store %d, of %d", admitted["zset4"], admitted["freqcap"], len(data))
	}
}

// TestZsetExpireFollowsTheSimulatedClock proves that at the end of the
// simulated day zsetExpire deletes exactly the sets whose expiry on that
// clock has passed, and that no set expired on Redis's own clock before.
func TestZsetExpireFollowsTheSimulatedClock(t *testing.T) {
	client := redistest.Client(t)
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
	} {
		if ok, err := decide(ctx, s.send, s.at); err != nil || !ok {
			t.Fatalf("send %+v: admitted %v, %v", s, ok, err)
		}
	}
	if n := client.DBSize(ctx).Val(); n != 8 {
		t.Fatalf("%d sets before zsetExpire, want 8: one expired on Redis's clock", n)
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
	}
	if !slices.Equal(left, want) {
		t.Fatalf("sets left at the end:\n got %q\nwant %q", left, want)
	}
}
