package recordlog

import (
	"encoding/binary"
	"errors"
	"math"
)

// Recorded is what one admission wrote into one sub-log: enough to take it
// back.
type Recorded struct {
	Key, Sub    string
	Grain, T, C int64
}

// EncodeID packs the records of an admission into an opaque id: for each,
// the key and the sub-log id, each after its length, then grain, t and c,
// all as uvarints. It stays in this process (a refund follows its
// admission), so it is built for speed, not for reading: it is made for
// every admission.
func EncodeID(recs []Recorded) string {
	var b []byte
	for _, r := range recs {
		b = AppendRecord(b, []byte(r.Key), []byte(r.Sub), r.Grain, r.T, r.C)
	}
	return string(b)
}

func AppendRecord(dst, key, sub []byte, grain, t, c int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	dst = binary.AppendUvarint(dst, uint64(len(sub)))
	dst = append(dst, sub...)
	dst = binary.AppendUvarint(dst, uint64(grain))
	dst = binary.AppendUvarint(dst, uint64(t))
	return binary.AppendUvarint(dst, uint64(c))
}

var errBadID = errors.New("malformed admission id")

// DecodeID is the inverse of encodeID; a string that is not whole records
// is errBadID.
func DecodeID(id string) ([]Recorded, error) {
	var recs []Recorded
	d := idDecoder{rest: id}
	for len(d.rest) > 0 && d.err == nil {
		var r Recorded
		r.Key = d.field()
		r.Sub = d.field()
		r.Grain, r.T, r.C = d.number(), d.number(), d.number()
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
