package limiter

import (
	"encoding/binary"
	"errors"
	"math"
)

// recorded is what one admission wrote into one sub-log: enough to take it
// back.
type recorded struct {
	key, sub    string
	grain, t, c int64
}

// encodeID packs the records of an admission into an opaque id: for each,
// the key and the sub-log id, each after its length, then grain, t and c,
// all as uvarints. It stays in this process (a refund follows its
// admission), so it is built for speed, not for reading: it is made for
// every admission.
func encodeID(recs []recorded) string {
	var b []byte
	for _, r := range recs {
		b = appendRecord(b, []byte(r.key), []byte(r.sub), r.grain, r.t, r.c)
	}
	return string(b)
}

func appendRecord(dst, key, sub []byte, grain, t, c int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(sub)))
	dst = append(dst, sub...)
	dst = binary.AppendUvarint(dst, uint64(grain))
	dst = binary.AppendUvarint(dst, uint64(t))
	return binary.AppendUvarint(dst, uint64(c))
}

var errBadID = errors.New("malformed admission id")

// decodeID is the inverse of encodeID; a string that is not whole records
// is errBadID.
func decodeID(id string) ([]recorded, error) {
	var recs []recorded
	d := idDecoder{rest: id}
	for len(d.rest) > 0 && d.err == nil {
		var r recorded
		r.key = d.field()
		r.sub = d.field()
		r.grain, r.t, r.c = d.number(), d.number(), d.number()
		recs = append(recs, r)
	}
	if d.err != nil || len(recs) == 0 {
		return nil, errBadID
	}
	return recs, nil
}

// idDecoder reads an id's parts in turn; after the first malformed one,
// err is set and every read returns zero.
type idDecoder struct {
	rest string
	err  error
}

func (d *idDecoder) number() int64 {
	if d.err != nil {
		return 0
	}
	// Uvarint reads at most 10 bytes of the string.
	var head [binary.MaxVarintLen64]byte
	v, n := binary.Uvarint(head[:copy(head[:], d.rest)])
	if n <= 0 || v > math.MaxInt64 {
		d.err = errBadID
		return 0
	}
	d.rest = d.rest[n:]
	return int64(v)
}

func (d *idDecoder) field() string {
	n := d.number()
	if d.err == nil && n > int64(len(d.rest)) {
		d.err = errBadID
	}
	if d.err != nil {
		return ""
	}
	f := d.rest[:n]
	d.rest = d.rest[n:]
	return f
}

// JoinIDs returns admission ids that refund, together, every admission of
// ids (the entries of one batch send): one Refund each instead of one an
// admission, so a batch's refund is one round trip per Redis node rather
// than one per entry. Ids of a Fallback's local decisions are joined apart
// from the others, so the result holds at most two ids. A joined id's
// Refund reports true when it gave back any of them.
func JoinIDs(ids []string) []string {
	var primary, local []byte
	for _, id := range ids {
		if len(id) > 0 && id[0] == localID {
			if local == nil {
				local = []byte{localID}
			}
			local = append(local, id[1:]...)
		} else {
			primary = append(primary, id...)
		}
	}
	var out []string
	if len(primary) > 0 {
		out = append(out, string(primary))
	}
	if len(local) > 1 {
		out = append(out, string(local))
	}
	return out
}
