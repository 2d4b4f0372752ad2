package recordlog

import (
	"bytes"
	"slices"
	"testing"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv1"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv2"
)

// gateway is one gateway's view of a shared value: it decodes it, prunes
// at now, decides one log's rules, records (marking an exempt send when it
// knows how), refunds and resets, and encodes the value back. v is the
// format it writes: 1 runs the frozen format 1 codec and algorithm; 2 is
// the previous version (format 2's reader refuses what it cannot read,
// then this algorithm, which format 3 left unchanged, writes format 2's
// layout); 0 or 3 is this version.
type gateway struct{ v int }

// refuses reports whether the gateway refuses to read blob, as an older
// one does a value of format 3.
func (g gateway) refuses(blob []byte) bool {
	switch g.v {
	case 1:
		var k recordlogv1.KeyLogs
		return recordlogv1.DecodeBlob(blob, &k) != nil
	case 2:
		var k recordlogv2.KeyLogs
		return recordlogv2.DecodeBlob(blob, &k) != nil
	}
	return false
}

// encode writes k as the gateway does.
func (g gateway) encode(t *testing.T, k *KeyLogs) []byte {
	t.Helper()
	if g.v == 2 {
		return appendFormat2(nil, k)
	}
	out, err := EncodeBlob(nil, k)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mixLog is the one log the mixed tests decide: its id, the id of its
// exempt marks, and its rules (10 s and 60 s rolling windows).
var (
	mixSub    = []byte("c=x")
	mixMarks  = AppendExemptID(nil, mixSub)
	mixRules  = []LogRule{{Limit: 5, Window: 10_000}, {Limit: 12, Window: 60_000}}
	mixRetain = int64(60_000)
)

// decide decides a send of cost at now over blob: whether it was
// admitted, each rule's used after it, the time it was recorded at (0:
// not), and the new value.
func (g gateway) decide(t *testing.T, blob []byte, now, cost, grain int64, exempt bool) (bool, []int64, int64, []byte) {
	t.Helper()
	used := make([]int64, len(mixRules))
	if g.refuses(blob) {
		t.Fatalf("format %d cannot read %x", g.v, blob)
	}
	if g.v == 1 {
		var k recordlogv1.KeyLogs
		if err := recordlogv1.DecodeBlob(blob, &k); err != nil {
			t.Fatalf("format 1 cannot read %x: %v", blob, err)
		}
		k.Prune(now)
		l := k.Find(mixSub)
		if l == nil {
			l = &recordlogv1.SubLog{}
		}
		ok := true
		raws := make([]recordlogv1.RawResult, len(mixRules))
		for i, r := range mixRules {
			raws[i], _ = l.Evaluate(&recordlogv1.LogRule{Limit: r.Limit, Window: r.Window}, cost, now)
			ok = ok && raws[i].Ok
		}
		var at int64
		if ok && cost > 0 {
			l = k.Sub(mixSub)
			l.Retention = mixRetain
			at = l.Record(now, cost, grain)
			for i, r := range mixRules {
				l.AfterRecord(&recordlogv1.LogRule{Limit: r.Limit, Window: r.Window}, &raws[i], cost, now)
			}
		}
		for i := range raws {
			used[i] = raws[i].Used
		}
		out, err := recordlogv1.EncodeBlob(nil, &k)
		if err != nil {
			t.Fatal(err)
		}
		return ok, used, at, out
	}
	var k KeyLogs
	if err := DecodeBlob(blob, &k); err != nil {
		t.Fatalf("this version cannot read %x: %v", blob, err)
	}
	k.Prune(now)
	l := k.Find(mixSub)
	if l == nil {
		l = &SubLog{}
	}
	ok := true
	raws := make([]RawResult, len(mixRules))
	for i := range mixRules {
		raws[i], _ = l.Evaluate(&mixRules[i], cost, now)
		ok = ok && raws[i].Ok
	}
	var at int64
	if ok && cost > 0 {
		l = k.Sub(mixSub)
		l.Retention = mixRetain
		at = l.Record(now, cost, grain)
		for i := range mixRules {
			l.AfterRecord(&mixRules[i], &raws[i], cost, now)
		}
		if exempt {
			k.MarkExempt(mixMarks, at, cost, mixRetain, grain)
		}
	}
	for i := range raws {
		used[i] = raws[i].Used
	}
	return ok, used, at, g.encode(t, &k)
}

// refund gives back the record made at at, as a refund of its admission
// id does; reset forgets the log.
func (g gateway) refund(t *testing.T, blob []byte, at, cost, grain, now int64) (bool, []byte) {
	t.Helper()
	if g.refuses(blob) {
		t.Fatalf("format %d cannot read %x", g.v, blob)
	}
	if g.v == 1 {
		var k recordlogv1.KeyLogs
		if err := recordlogv1.DecodeBlob(blob, &k); err != nil {
			t.Fatal(err)
		}
		k.Prune(now)
		l := k.Find(mixSub)
		given := l != nil && l.Refund(at, cost, grain, now)
		out, _ := recordlogv1.EncodeBlob(nil, &k)
		return given, out
	}
	var k KeyLogs
	if err := DecodeBlob(blob, &k); err != nil {
		t.Fatal(err)
	}
	k.Prune(now)
	given := k.Refund(mixSub, at, cost, grain, now)
	return given, g.encode(t, &k)
}

func (g gateway) reset(t *testing.T, blob []byte, now int64) []byte {
	t.Helper()
	if g.refuses(blob) {
		t.Fatalf("format %d cannot read %x", g.v, blob)
	}
	if g.v == 1 {
		var k recordlogv1.KeyLogs
		if err := recordlogv1.DecodeBlob(blob, &k); err != nil {
			t.Fatal(err)
		}
		k.Prune(now)
		if l := k.Find(mixSub); l != nil {
			l.Forget()
		}
		out, _ := recordlogv1.EncodeBlob(nil, &k)
		return out
	}
	var k KeyLogs
	if err := DecodeBlob(blob, &k); err != nil {
		t.Fatal(err)
	}
	k.Prune(now)
	k.Forget(mixSub)
	return g.encode(t, &k)
}

// exemptOf reads blob's log at now with this version: its entries and each
// one's exempt units.
func exemptOf(t *testing.T, blob []byte, now, grain int64) ([]Entry, []int64) {
	t.Helper()
	var k KeyLogs
	if err := DecodeBlob(blob, &k); err != nil {
		t.Fatal(err)
	}
	k.Prune(now)
	l := k.Find(mixSub)
	if l == nil {
		return nil, nil
	}
	return l.Entries, k.ExemptUnits(nil, mixSub, l, grain)
}

// TestExemptMarks proves the marks on one log, exact (grain 0) and
// bucketed: an exempt send is marked with its units, others are not; a
// refund of an exempt send takes its mark; a reset takes every mark; the
// marks survive encoding; and a value with no exempt send is the same
// bytes in formats 1 and 2, and in format 3 refused by both.
func TestExemptMarks(t *testing.T) {
	g := gateway{}
	for _, grain := range []int64{0, 1000} {
		var blob []byte
		type send struct {
			now, cost int64
			exempt    bool
		}
		var ats []int64
		for _, s := range []send{{1000, 1, false}, {1200, 2, true}, {2500, 1, true}, {3000, 1, true}} {
			ok, _, at, out := g.decide(t, blob, s.now, s.cost, grain, s.exempt)
			if !ok {
				t.Fatalf("grain %d: send at %d refused", grain, s.now)
			}
			blob = out
			ats = append(ats, at)
		}
		entries, ex := exemptOf(t, blob, 3000, grain)
		want := map[int64][]int64{0: {0, 2, 1, 1}, 1000: {2, 1, 1}}[grain]
		if !slices.Equal(ex, want) {
			t.Fatalf("grain %d: entries %v, exempt %v; want %v", grain, entries, ex, want)
		}
		// The record at 3000 was exempt: its refund takes its mark.
		given, out := g.refund(t, blob, ats[3], 1, grain, 3000)
		if !given {
			t.Fatalf("grain %d: refund refused", grain)
		}
		_, ex = exemptOf(t, out, 3000, grain)
		want = map[int64][]int64{0: {0, 2, 1}, 1000: {2, 1}}[grain]
		if !slices.Equal(ex, want) {
			t.Fatalf("grain %d: after the refund exempt %v; want %v", grain, ex, want)
		}
		out = g.reset(t, out, 3000)
		var k KeyLogs
		if err := DecodeBlob(out, &k); err != nil || k.findExempt(mixSub) != nil {
			t.Fatalf("grain %d: a reset left the marks: %x, %v", grain, out, err)
		}
		// Without exempt sends, formats 1 and 2 write the same bytes.
		_, _, _, b2 := gateway{v: 2}.decide(t, nil, 1000, 1, grain, false)
		_, _, _, b1 := gateway{v: 1}.decide(t, nil, 1000, 1, grain, false)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("grain %d: a value with no exempt send differs: %x and %x", grain, b1, b2)
		}
		_, _, _, b3 := g.decide(t, nil, 1000, 1, grain, false)
		oldReadersRefuse(t, b3)
	}
}

// TestFormat2ReadByFormat1 proves the upgrade's two directions on fixed
// values: the older version reads a value with marks and counts what the
// newer counts, keeps the marks through its own writes, and what it does
// to a record without touching its mark (a refund, a reset) never makes
// the newer version count a mark for a send that is not there.
func TestFormat2ReadByFormat1(t *testing.T) {
	g1, g2 := gateway{v: 1}, gateway{v: 2}
	var blob []byte
	var ats []int64
	for i, now := range []int64{1000, 2000, 3000} {
		_, _, at, out := g2.decide(t, blob, now, 1, 0, i != 1)
		blob, ats = out, append(ats, at)
	}
	// The older version decides the next send over it: the same count.
	ok1, used1, _, out1 := g1.decide(t, blob, 4000, 1, 0, false)
	ok2, used2, _, out2 := g2.decide(t, blob, 4000, 1, 0, false)
	if ok1 != ok2 || !slices.Equal(used1, used2) || !bytes.Equal(out1, out2) {
		t.Fatalf("the versions decide apart: %v %v %x and %v %v %x", ok1, used1, out1, ok2, used2, out2)
	}
	if _, ex := exemptOf(t, out1, 4000, 0); !slices.Equal(ex, []int64{1, 0, 1, 0}) {
		t.Fatalf("after the older version wrote it, exempt %v", ex)
	}
	// The older version refunds the exempt send at 3000: its mark is
	// left, and matches no record.
	given, out := g1.refund(t, out1, ats[2], 1, 0, 4000)
	if !given {
		t.Fatal("refund refused")
	}
	_, _, at, out := g2.decide(t, out, 5000, 1, 0, false)
	if entries, ex := exemptOf(t, out, 5000, 0); !slices.Equal(ex, []int64{1, 0, 0, 0}) {
		t.Fatalf("after an older refund: entries %v, exempt %v (the next record at %d)", entries, ex, at)
	}
	// The older version resets the log: the marks stay, and none counts
	// for a send after the reset.
	out = g1.reset(t, out, 5000)
	_, _, _, out = g2.decide(t, out, 5000, 1, 0, false)
	if _, ex := exemptOf(t, out, 5000, 0); !slices.Equal(ex, []int64{0}) {
		t.Fatalf("after an older reset: exempt %v", ex)
	}
}

// FuzzMixedVersions runs one sequence of sends, refunds and resets twice
// over one log: by gateways of this version alone, and by gateways of
// formats 1, 2 and 3 in turn, as the bytes say. An older gateway refuses
// the value once a gateway of this version has written it (format 3), and
// reads every other; when it refuses, the step is left out of both runs,
// as a gateway that answers an error changes nothing. Both runs decide
// every other step alike, with the same counts and record times, and hold
// the same records; no record shows more exempt units than it holds; and
// in a log that keeps every record, each shows exactly the exempt units of
// the run alone, less those only a format 1 gateway saw.
func FuzzMixedVersions(f *testing.F) {
	f.Add([]byte{0, 0x04, 1, 0x0c, 2, 0x14, 1, 0x06, 0, 0x02, 0, 0x2d, 3})
	f.Add([]byte{1, 0x04, 1, 0x05, 1, 0x0c, 2, 0x46, 0, 0x0e, 1, 0x13, 0})
	f.Add([]byte{0, 0x04, 1, 0x04, 1, 0x07, 0, 0x0f, 0})
	f.Add([]byte{0, 0x04, 0x81, 0x0c, 0x82, 0x18, 0x81, 0x14, 1, 0x0c, 2, 0x44, 0x81, 0x0a, 0x83})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 {
			return
		}
		grain := int64(ops[0]&1) * 1000
		ops = ops[1:]
		type rec struct {
			at, cost int64
			exempt   bool
		}
		var mixed, alone []byte
		var recs []rec
		v1Exempt := false
		now := int64(1_000_000)
		for len(ops) >= 2 {
			op, arg := ops[0], ops[1]
			ops = ops[2:]
			now += int64(op>>4) * 700
			g := gateway{v: 3}
			if op&8 != 0 {
				g.v = 1
			} else if arg&0x80 != 0 {
				g.v = 2
			}
			exempt := op&4 != 0
			if g.refuses(mixed) != (g.v < 3 && hasCompact(mixed)) {
				t.Fatalf("format %d refuses %x: %v", g.v, mixed, g.refuses(mixed))
			}
			if g.refuses(mixed) {
				continue
			}
			switch op & 3 {
			case 0, 1:
				cost := int64(arg & 3)
				okM, usedM, atM, outM := g.decide(t, mixed, now, cost, grain, exempt)
				okA, usedA, atA, outA := gateway{}.decide(t, alone, now, cost, grain, exempt)
				if okM != okA || !slices.Equal(usedM, usedA) || atM != atA {
					t.Fatalf("at %d: mixed decided %v %v at %d, this version alone %v %v at %d", now, okM, usedM, atM, okA, usedA, atA)
				}
				mixed, alone = outM, outA
				if atA > 0 {
					recs = append(recs, rec{atA, cost, exempt})
					v1Exempt = v1Exempt || (g.v == 1 && exempt)
				}
			case 2:
				if len(recs) == 0 {
					continue
				}
				r := recs[int(arg&0x7f)%len(recs)]
				givenM, outM := g.refund(t, mixed, r.at, r.cost, grain, now)
				givenA, outA := gateway{}.refund(t, alone, r.at, r.cost, grain, now)
				if givenM != givenA {
					t.Fatalf("refund of %d: mixed %v, this version alone %v", r.at, givenM, givenA)
				}
				mixed, alone = outM, outA
			case 3:
				if arg&7 != 0 {
					continue // resets are rare
				}
				mixed = g.reset(t, mixed, now)
				alone = gateway{}.reset(t, alone, now)
			}
			entM, exM := exemptOf(t, mixed, now, grain)
			entA, exA := exemptOf(t, alone, now, grain)
			if !slices.Equal(entM, entA) {
				t.Fatalf("at %d the runs hold different records: %v and %v", now, entM, entA)
			}
			for i, e := range entM {
				if exM[i] < 0 || exM[i] > e.C || exA[i] < 0 || exA[i] > e.C {
					t.Fatalf("at %d record %v shows %d and %d exempt units", now, e, exM[i], exA[i])
				}
				if grain == 0 && (exM[i] > exA[i] || (!v1Exempt && exM[i] != exA[i])) {
					t.Fatalf("at %d record %v: mixed shows %d exempt, this version alone %d", now, e, exM[i], exA[i])
				}
				if grain == 0 {
					// Alone, this version is exact.
					j := slices.IndexFunc(recs, func(r rec) bool { return r.at == e.T })
					if j < 0 || (recs[j].exempt && exA[i] != e.C) || (!recs[j].exempt && exA[i] != 0) {
						t.Fatalf("at %d record %v shows %d exempt units; it was made by %+v", now, e, exA[i], recs[max(j, 0)])
					}
				}
			}
		}
	})
}
