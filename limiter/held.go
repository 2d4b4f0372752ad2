package limiter

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file lists what a store holds about one value of a first dimension
// (every record log under the key of recipient=alice: her own counts, and
// one log for each content, channel or campaign she was sent), for support
// staff asked "what do you hold about this person?" and "reset all of it".
// A request names its logs by all their dimensions' values; a listing has
// only the first, so it reads the key whole and names each log by the id
// stored in it (HeldLog.Sub), which a Check then reads or resets through
// Check.Sub.

// HeldLog is one record log held under a first dimension's value.
type HeldLog struct {
	// Sub is the log's id within the key. A Check with Sub set reads (or,
	// in Reset, forgets) exactly this log.
	Sub string
	// Values are the values of the log's other dimensions, by dimension
	// name, as the store keeps them: the value itself, or, for one longer
	// than MaxValueLen, "#" and the hex of a 128-bit hash of it (the store
	// never holds such a value).
	Values map[string]string
	// Hashed names, sorted, the dimensions whose value is such a hash (a
	// value that itself starts with "#" is not one).
	Hashed []string
	// Weight is what its costs measure ("" counts sends).
	Weight string
	// Records is how many records (sends, or buckets of them) it holds.
	Records int
	// Unreadable marks a log whose id could not be read (Values and
	// Weight are then empty): no rule reads it, and only its Sub can
	// name it, to reset it.
	Unreadable bool
}

// StoredForm is v as a HeldLog shows a value or weight: v itself, or,
// longer than MaxValueLen, "#" and the hex of its hash.
func StoredForm(v string) string {
	if len(v) > MaxValueLen {
		return string(appendValue(nil, v))
	}
	return v
}

// Dimensions are the names of the log's other dimensions, sorted.
func (h HeldLog) Dimensions() []string {
	names := make([]string, 0, len(h.Values))
	for n := range h.Values {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lister is a Store that can list every log it holds under one value of
// a first dimension. The Memory, Redis and Fallback stores implement it.
type Lister interface {
	// Held lists the logs under dim = value that still hold a record at
	// now (the store's clock when zero), ordered by Sub.
	Held(ctx context.Context, dim, value string, now time.Time) ([]HeldLog, error)
}

// HeldOf lists the logs of k, which the caller has pruned.
func HeldOf(k *recordlog.KeyLogs) ([]HeldLog, error) {
	if k == nil {
		return nil, nil
	}
	out := make([]HeldLog, 0, len(k.Subs))
	for i := range k.Subs {
		l := &k.Subs[i]
		if len(l.Entries) == 0 || recordlog.IsAnnex(l.Id) {
			continue // an annex rides with its log: a reset of it forgets both
		}
		h, err := parseSub(string(l.Id))
		if err != nil {
			// Listed all the same, so that it can be forgotten.
			h = HeldLog{Sub: string(l.Id), Values: map[string]string{}, Unreadable: true}
		}
		h.Records = len(l.Entries)
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Sub < out[j].Sub })
	return out, nil
}

// parseSub reads a sub-log id (see keys.go): name=value pairs joined by
// '&', then '$' and the weight; values escaped, a hashed one starting with
// '#'.
func parseSub(sub string) (HeldLog, error) {
	h := HeldLog{Sub: sub, Values: map[string]string{}}
	pairs, weight, hasWeight := strings.Cut(sub, "$")
	if hasWeight {
		w, err := unescapeStored(weight)
		if err != nil {
			return HeldLog{}, fmt.Errorf("%w: sub-log %q: %v", ErrStore, sub, err)
		}
		h.Weight = w
	}
	if pairs == "" {
		return h, nil
	}
	for _, pair := range strings.Split(pairs, "&") {
		name, v, ok := strings.Cut(pair, "=")
		if !ok || name == "" {
			return HeldLog{}, fmt.Errorf("%w: sub-log %q: no name=value in %q", ErrStore, sub, pair)
		}
		value, err := unescapeStored(v)
		if err != nil {
			return HeldLog{}, fmt.Errorf("%w: sub-log %q: %v", ErrStore, sub, err)
		}
		h.Values[name] = value
		if strings.HasPrefix(v, "#") { // a '#' of a value is escaped
			h.Hashed = append(h.Hashed, name)
		}
	}
	sort.Strings(h.Hashed)
	return h, nil
}

// unescapeStored undoes appendValue's escapes; a hashed value ("#" and
// hex) is kept as it is.
func unescapeStored(v string) (string, error) {
	if !strings.Contains(v, "%") {
		return v, nil
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b.WriteByte(v[i])
			continue
		}
		if i+2 >= len(v) || unhex(v[i+1]) < 0 || unhex(v[i+2]) < 0 {
			return "", errors.New("a broken escape in " + v)
		}
		b.WriteByte(byte(unhex(v[i+1])<<4 | unhex(v[i+2])))
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// HeldRequest is a request whose one check reads the key of dim = value.
func HeldRequest(dim, value string, now time.Time) *Request {
	r := &Rule{Name: "held", By: []string{dim}, Limit: 1, Window: Window{Duration: time.Minute}}
	return &Request{Checks: []Check{{Rule: r, Values: []string{value}}}, Now: now}
}

// Held implements Lister: the logs of both stores, the primary's first
// (a log the local store recorded during an outage is held too, and
// enforced again at the next), or the local store's alone while the
// primary fails. A log both hold is listed once, with the primary's
// records.
func (f *Fallback) Held(ctx context.Context, dim, value string, now time.Time) ([]HeldLog, error) {
	pl, pok := f.primary.(Lister)
	ll, lok := f.local.(Lister)
	if !pok || !lok {
		return nil, fmt.Errorf("%w: the store cannot list what it holds", ErrStore)
	}
	local, err := ll.Held(ctx, dim, value, now)
	if err != nil {
		return nil, err
	}
	held, err := pl.Held(ctx, dim, value, now)
	if err != nil {
		if fails(ctx, err) {
			return local, nil
		}
		return nil, err
	}
	seen := make(map[string]bool, len(held))
	for _, h := range held {
		seen[h.Sub] = true
	}
	for _, h := range local {
		if !seen[h.Sub] {
			held = append(held, h)
		}
	}
	sort.Slice(held, func(i, j int) bool { return held[i].Sub < held[j].Sub })
	return held, nil
}
