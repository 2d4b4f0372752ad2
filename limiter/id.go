package limiter

import (
	"errors"
	"strconv"
	"strings"
)

// recorded is what one admission wrote into one sub-log: enough to take it
// back.
type recorded struct {
	key, sub    string
	grain, t, c int64
}

// encodeID packs the records of an admission into an opaque id: for each,
// "<len>:<key><len>:<sub><grain>,<t>,<c>;". Length prefixes keep any byte of
// a key or sub-log id from being read as a separator.
func encodeID(recs []recorded) string {
	var b []byte
	for _, r := range recs {
		b = appendRecord(b, []byte(r.key), []byte(r.sub), r.grain, r.t, r.c)
	}
	return string(b)
}

func appendRecord(dst, key, sub []byte, grain, t, c int64) []byte {
	dst = strconv.AppendInt(dst, int64(len(key)), 10)
	dst = append(dst, ':')
	dst = append(dst, key...)
	dst = strconv.AppendInt(dst, int64(len(sub)), 10)
	dst = append(dst, ':')
	dst = append(dst, sub...)
	dst = strconv.AppendInt(dst, grain, 10)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, t, 10)
	dst = append(dst, ',')
	dst = strconv.AppendInt(dst, c, 10)
	return append(dst, ';')
}

var errBadID = errors.New("malformed admission id")

// decodeID is the inverse of encodeID; any other string is errBadID.
func decodeID(id string) ([]recorded, error) {
	var recs []recorded
	for len(id) > 0 {
		var r recorded
		var err error
		if r.key, id, err = cutPrefixed(id); err != nil {
			return nil, err
		}
		if r.sub, id, err = cutPrefixed(id); err != nil {
			return nil, err
		}
		end := strings.IndexByte(id, ';')
		if end < 0 {
			return nil, errBadID
		}
		nums := strings.Split(id[:end], ",")
		id = id[end+1:]
		if len(nums) != 3 {
			return nil, errBadID
		}
		var v [3]int64
		for i, s := range nums {
			if v[i], err = strconv.ParseInt(s, 10, 64); err != nil || v[i] < 0 {
				return nil, errBadID
			}
		}
		r.grain, r.t, r.c = v[0], v[1], v[2]
		recs = append(recs, r)
	}
	if len(recs) == 0 {
		return nil, errBadID
	}
	return recs, nil
}

func cutPrefixed(s string) (field, rest string, err error) {
	colon := strings.IndexByte(s, ':')
	if colon < 0 {
		return "", "", errBadID
	}
	n, err := strconv.Atoi(s[:colon])
	if err != nil || n < 0 || n > len(s)-colon-1 {
		return "", "", errBadID
	}
	return s[colon+1 : colon+1+n], s[colon+1+n:], nil
}
