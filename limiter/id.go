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
	if len(recs) == 0 {
		return ""
	}
	var b strings.Builder
	for _, r := range recs {
		for _, s := range [2]string{r.key, r.sub} {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
		for i, n := range [3]int64{r.grain, r.t, r.c} {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(n, 10))
		}
		b.WriteByte(';')
	}
	return b.String()
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
