package zones

import (
	"fmt"
	"strings"
	"testing"
)

// Spellings of one zone that time.LoadLocation accepts ("America/./New_York",
// "America//New_York", ...) are unknown zones: none is cached, so 20,000
// of them from {json.tz} leave the cache holding the one canonical name,
// and the zone database's own names all load.
func TestOnlyCanonicalNamesAreCached(t *testing.T) {
	if OfRequest("America/New_York") == nil {
		t.Fatal("America/New_York does not load")
	}
	for i := range 20_000 {
		name := "America/" + strings.Repeat("./", 1+i%20) + "New_York"
		if i%2 == 1 {
			name = "America" + strings.Repeat("/", 2+i%20) + "New_York"
		}
		if i%3 == 2 {
			name = fmt.Sprintf("America/%sNew_York", strings.Repeat("../America/", 1+i%5))
		}
		if z := OfRequest(name); z != nil {
			t.Fatalf("%q loaded as %s", name, z)
		}
	}
	n := 0
	zoneCache.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Fatalf("the cache holds %d zones; want 1", n)
	}
	for _, name := range []string{"Asia/Shanghai", "America/Port-au-Prince", "Etc/GMT+5", "Etc/GMT-14", "EST5EDT", "UTC", "America/Argentina/Buenos_Aires"} {
		if _, err := Load(name); err != nil {
			t.Errorf("Load(%q): %v", name, err)
		}
		if OfRequest(name) == nil {
			t.Errorf("OfRequest(%q) = nil", name)
		}
	}
	for _, name := range []string{"America/./New_York", "America//New_York", "/America/New_York", "America/New_York/", "Local", ""} {
		if _, err := Load(name); err == nil {
			t.Errorf("Load(%q) loaded", name)
		}
	}
}

// An unknown zone's error quotes at most 64 bytes of it: a sender's 40 KB
// name is not echoed back whole.
func TestUnknownZoneQuotedShort(t *testing.T) {
	_, err := Load(strings.Repeat("x", 40_000))
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("error of %d bytes: %.100v", len(fmt.Sprint(err)), err)
	}
}

// The names only a host's zoneinfo directory has are no zones, in the
// config and in a request alike: "localtime" follows the host's clock
// setting, "right/" zones count leap seconds, and the embedded database
// has none of them, so two gateways on one store would disagree on a
// recipient's day. (Before, a Debian host took them.)
func TestHostOnlyNamesAreNoZones(t *testing.T) {
	for _, name := range []string{"localtime", "posixrules", "posix/Asia/Tokyo", "right/UTC", "right/Asia/Tokyo"} {
		if _, err := Load(name); err == nil {
			t.Errorf("Load(%q) loaded", name)
		}
		if z := OfRequest(name); z != nil {
			t.Errorf("OfRequest(%q) = %v", name, z)
		}
	}
	if _, err := Load("Asia/Tokyo"); err != nil {
		t.Error(err)
	}
}
