package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Frequency-Cap-Dropped lists the removed paths in body order up to 4 KiB,
// and Frequency-Cap-Dropped-Count says how many were removed: 997 gorush
// tokens dropped made an 18 KB header, which Node's clients refused after
// the admitted tokens had been delivered. A short list goes whole.
func TestDroppedHeaderBounded(t *testing.T) {
	var paths []string
	for i := range 997 {
		paths = append(paths, fmt.Sprintf("notifications.0.tokens.%d", i))
	}
	h := http.Header{}
	setDropped(h, paths)
	list := h.Get("Frequency-Cap-Dropped")
	if len(list) > maxDroppedList || len(list) < maxDroppedList-64 || h.Get("Frequency-Cap-Dropped-Count") != "997" {
		t.Fatalf("997 paths: a list of %d bytes, count %q; want at most %d bytes, count 997", len(list), h.Get("Frequency-Cap-Dropped-Count"), maxDroppedList)
	}
	items := strings.Split(list, ", ")
	for i, it := range items {
		if it != `"`+paths[i]+`"` {
			t.Fatalf("item %d is %s, want the %dth path removed, %q", i, it, i, paths[i])
		}
	}

	h = http.Header{}
	setDropped(h, paths[:2])
	if h.Get("Frequency-Cap-Dropped") != `"notifications.0.tokens.0", "notifications.0.tokens.1"` || h.Get("Frequency-Cap-Dropped-Count") != "2" {
		t.Errorf("two paths: %v", h)
	}
	h = http.Header{}
	if setDropped(h, nil); len(h) != 0 {
		t.Errorf("nothing dropped: %v", h)
	}
}
