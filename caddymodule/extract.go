package caddymodule

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/internal/bodycodec"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// What an expression needs from the request body, and how to read it.
const (
	needJSON = 1 << iota
	needForm
	// needAnyType reads the body whatever Content-Type it declares
	// (Handler.AnyContentType).
	needAnyType
)

// needsOf tells which body placeholders expr uses.
func needsOf(expr string) int {
	n := 0
	if strings.Contains(expr, "{json.") || hasReader(expr) {
		n |= needJSON
	}
	if strings.Contains(expr, "{form.") {
		n |= needForm
	}
	return n
}

// placeholderArgs returns what follows "{<kind>." up to "}" in each
// such placeholder of expr: the paths of {json.<path>}, the fields of
// {form.<field>}.
func placeholderArgs(expr, kind string) []string {
	open := "{" + kind + "."
	var args []string
	for rest := expr; ; {
		i := strings.Index(rest, open)
		if i < 0 {
			return args
		}
		rest = rest[i+len(open):]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return args
		}
		args = append(args, rest[:end])
		rest = rest[end:]
	}
}

// jsonPathsOf returns the paths of the {json.<path>} placeholders in expr,
// parsed as batch paths ("*" a wildcard); a path that does not parse (the
// config check reports it) is left out.
//
// The paths of reader placeholders ({fcm_topics.<path>}) are among them, and so
// are the members that wildcard filters read ("notifications.*.platform"
// for "notifications.*[platform!=1].topic"): a body that shadows one of
// them is refused as one that shadows a path read.
func jsonPathsOf(expr string) []*jsonbatch.Path {
	var paths []*jsonbatch.Path
	args := append(placeholderArgs(expr, "json"), readerPaths(expr)...)
	for _, a := range args {
		if p, err := jsonbatch.ParsePath(a); err == nil {
			paths = append(paths, p)
			paths = append(paths, p.FilterPaths()...)
		}
	}
	return paths
}

// formFieldsOf returns the fields of the {form.<field>} placeholders in
// expr.
func formFieldsOf(expr string) []string { return placeholderArgs(expr, "form") }

// repeatedField refuses a form body that gives a field a placeholder
// reads more than once: readers differ on which counts (Go's FormValue
// and Django read the first, PHP and Rails the last), so a sender could
// be counted under one recipient and delivered to another. It is the
// form's counterpart of a JSON object that names a member twice.
func repeatedField(form url.Values, fields []string) *reply.Failure {
	for _, f := range fields {
		if n := len(form[f]); n > 1 {
			return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request body is not a valid form: it gives field %q %d times, and readers differ on which counts", f, n)}
		}
		if k, ok := aliasOf(form, f); ok {
			return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request body is not a valid form: it names %q, which PHP reads as field %q", k, f)}
		}
	}
	return nil
}

// aliasOf returns a name of vs other than f that a server reads as f
// (see serverName): PHP, whose $_POST['To'] of "To=ann&%20To=bob" is bob,
// would send to a recipient other than the one counted.
func aliasOf(vs url.Values, f string) (string, bool) {
	nested := strings.IndexByte(f, '[') > 0 // message[to]: read as nested
	want := serverName(f, nested)
	for k := range vs {
		if k != f && serverName(k, nested) == want {
			return k, true
		}
	}
	return "", false
}

// serverName is the field a form or query name k is to the servers that
// rewrite names: PHP drops leading spaces, ends a name at a NUL and turns
// spaces and dots in its base into underscores ("phone.number" is
// phone_number), and reads "to[]" and "to[x]" as to, an array (Express's
// qs and Rails do too): the brackets are cut unless nested, where a name
// is compared with them ("message[to]" and "message[body]" differ).
func serverName(k string, nested bool) string {
	k = strings.TrimLeft(k, " ")
	if i := strings.IndexByte(k, 0); i >= 0 {
		k = k[:i]
	}
	base, rest := k, ""
	if i := strings.IndexByte(k, '['); i > 0 {
		base, rest = k[:i], k[i:]
	}
	if !nested {
		rest = ""
	}
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '.' {
			return '_'
		}
		return r
	}, base) + rest
}

// repeatedInRequest refuses a request that gives a query parameter or a
// header field a placeholder reads more than once: Caddy's placeholder
// joins the values with commas ("alice,x1"), counted as a recipient of
// its own, while an upstream reads one of them (Go's Query().Get and
// Header.Get the first, others the last), so a sender could reach a
// capped recipient past her cap. So is a query parameter that is not
// UTF-8 once decoded: Python and Node read invalid UTF-8 as U+FFFD, so
// "carol%80" and "carol%81" would be two recipients here and one there.
func repeatedInRequest(r *http.Request, params, headers []string) *reply.Failure {
	if len(params) > 0 {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			// Go drops a pair it cannot read ("x=1;to=hank": some
			// readers split on ";" and would see to=hank).
			return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request query is not one every reader reads alike: %v", err)}
		}
		for _, p := range params {
			if n := len(q[p]); n > 1 {
				return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request query gives parameter %q %d times, and readers differ on which counts", p, n)}
			}
			if v := q.Get(p); !utf8.ValidString(v) {
				return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request query parameter %q is not UTF-8, which readers decode differently", p)}
			}
			if k, ok := aliasOf(q, p); ok {
				return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request query names %q, which PHP reads as parameter %q", k, p)}
			}
		}
	}
	for _, h := range headers {
		if n := len(r.Header.Values(h)); n > 1 {
			return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request gives header field %q %d times, and readers differ on which counts", h, n)}
		}
	}
	return nil
}

// uncleanPath refuses a request whose path a placeholder reads when the
// path has a dot segment ("/3/device/x/../tok", "%2e%2e" too), an empty
// one ("//3/device/tok") or an encoded slash: the placeholder reads its
// segments as sent and reverse_proxy passes them on so, while a server or
// proxy that cleans paths (nginx, Go's ServeMux, many frameworks)
// delivers to tok, past the cap counted for x, or shifts every segment. So
// is a path that is not UTF-8 once decoded, which Python and Node read with
// U+FFFD for each bad byte ("/device/erin%80" and "%81" alike).
func uncleanPath(r *http.Request) *reply.Failure {
	raw := r.URL.EscapedPath()
	if !utf8.ValidString(r.URL.Path) {
		return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request path %q is not UTF-8, which readers decode differently", raw)}
	}
	unclean := strings.Contains(raw, "//") || strings.Contains(strings.ToLower(raw), "%2f")
	for seg := range strings.SplitSeq(r.URL.Path, "/") {
		unclean = unclean || seg == "." || seg == ".."
	}
	if !unclean {
		return nil
	}
	return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request path %q has an empty or dot segment or an encoded slash, which readers resolve differently", raw)}
}

// formFieldInQuery refuses a form body whose field a placeholder reads
// is also in the query string, or is not UTF-8: readers differ there too
// (Go's FormValue reads the body's, Flask's request.values the query's;
// Python and Node decode invalid UTF-8 to U+FFFD, so "%F1" and "%F2"
// would be one text upstream and two here).
func formFieldInQuery(r *http.Request, form url.Values, fields []string) *reply.Failure {
	q := r.URL.Query()
	for _, f := range fields {
		if _, ok := q[f]; ok {
			if _, inBody := form[f]; inBody {
				return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request gives form field %q in its body and in its query, and readers differ on which counts", f)}
			}
		}
		for _, v := range form[f] {
			if !utf8.ValidString(v) {
				return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request body is not a valid form: field %q is not UTF-8", f)}
			}
		}
	}
	return nil
}

// foldedName refuses a JSON body that names, along a path the cap set
// reads, a member that Go's encoding/json would take for the member read
// ("To" beside "to", or "Tokens" instead of "tokens"): an upstream that
// parses with it (gorush, and many others) would send to a recipient
// other than the one counted, or move exempt or zone. Such a body is
// refused as one that names a member twice is.
func foldedName(doc []byte, paths *jsonbatch.Folds) *reply.Failure {
	if name, seg, ok := paths.FoldedName(doc); ok {
		return &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("request body is not valid JSON: an object names %q where %q is read, which encoding/json reads as one name", name, seg)}
	}
	return nil
}

// body holds what the body placeholders read from one request.
type body struct {
	json []byte // one valid JSON value (see parseJSON)
	form url.Values
	// coding is the Content-Encoding the body came in, for a body the
	// handler rewrites (batch drop) to go out in the same.
	coding bodycodec.Coding
}

// provide answers the {json.<path>} and {form.<field>} placeholders; it is
// a caddy.ReplacerFunc.
func (b *body) provide(key string) (any, bool) {
	switch {
	case strings.HasPrefix(key, "json."):
		if b.json == nil {
			return nil, false
		}
		return lookupJSON(b.json, key[len("json."):])
	case strings.HasPrefix(key, "form."):
		if b.form == nil {
			return nil, false
		}
		vs, ok := b.form[key[len("form."):]]
		if !ok || len(vs) == 0 {
			return nil, false
		}
		return vs[0], true
	}
	return nil, false
}

// readBody reads the request body once, at most maxBody bytes, decodes it
// when it came with a Content-Encoding (at most maxBody bytes decoded),
// parses what needs asks for, and puts the bytes back as they came so the
// next handler reads them unchanged. A failure is the answer to give the
// sender.
func readBody(r *http.Request, needs int, maxBody int64) (*body, *reply.Failure) {
	if r.ContentLength > maxBody {
		return nil, tooLarge(maxBody)
	}
	coding, err := bodycodec.Parse(r.Header.Values("Content-Encoding"))
	if err != nil {
		return nil, &reply.Failure{Status: http.StatusUnsupportedMediaType, Reason: fmt.Sprintf("request body: %v; accepted: %s", err, bodycodec.Accepted)}
	}
	var raw []byte
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		raw, err = readAtMost(r, maxBody)
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, tooLarge(mbe.Limit)
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Caddy's read_body timeout: the sender was too slow.
				return nil, &reply.Failure{Status: http.StatusRequestTimeout, Reason: "reading request body: timed out"}
			}
			// Not the connection's addresses: the sender needs the cause.
			var oe *net.OpError
			if errors.As(err, &oe) && oe.Err != nil {
				err = oe.Err
			}
			return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("reading request body: %v", err)}
		}
		if int64(len(raw)) > maxBody {
			return nil, tooLarge(maxBody)
		}
		r.Body = replayBody{Reader: bytes.NewReader(raw), Closer: r.Body}
	}

	b := &body{coding: coding}
	if coding != bodycodec.Identity && len(raw) > 0 {
		// No body at all is no body in any coding (a GET that declares
		// one): its dimensions are missing, as without the coding.
		raw, b.coding, err = bodycodec.Decode(coding, raw, maxBody)
		switch {
		case errors.Is(err, bodycodec.ErrTooLarge):
			return nil, &reply.Failure{Status: http.StatusRequestEntityTooLarge, Reason: fmt.Sprintf("request body decoded from %s is larger than max_body (%d bytes)", coding, maxBody)}
		case err != nil:
			return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: "request body: " + err.Error()}
		}
	}
	if needs&needAnyType == 0 {
		if n := len(r.Header.Values("Content-Type")); n > 1 {
			// An upstream may parse by the last; the check reads one.
			return nil, &reply.Failure{Status: http.StatusUnsupportedMediaType, Reason: fmt.Sprintf("request declares Content-Type %d times, and readers differ on which counts; send one", n)}
		}
		var fail *reply.Failure
		if needs, fail = declaredFormat(r.Header.Get("Content-Type"), needs); fail != nil {
			return nil, fail
		}
	}
	if needs&needJSON != 0 {
		v, err := parseJSON(raw)
		if len(v) == 0 && errors.Is(err, jsonbatch.ErrEmptyDocument) {
			// No body (a GET through a cap set without a matcher): no
			// field, so each dimension read from it is missing, and
			// on_missing decides, as for a body without those fields.
			v, err = []byte("null"), nil
		}
		if err != nil {
			return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: "request body is not valid JSON: " + err.Error()}
		}
		b.json = v
	}
	if needs&needForm != 0 {
		f, err := url.ParseQuery(string(raw))
		if err != nil {
			return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: "request body is not a valid form (application/x-www-form-urlencoded, as a body that declares no Content-Type is read): " + err.Error()}
		}
		b.form = f
	}
	return b, nil
}

// declaredFormat checks the body's declared Content-Type against the
// formats needs reads, and returns the ones to read: a JSON type
// (application/json, or any +json) for {json.*}, a form type for
// {form.*}. A body that declares another format, which an upstream that
// parses by Content-Type would read otherwise, is answered 415; one that
// declares no type is read as needs asks.
func declaredFormat(contentType string, needs int) (int, *reply.Failure) {
	if strings.TrimSpace(contentType) == "" {
		return needs, nil
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if cs, ok := params["charset"]; err == nil && ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		// The body is read as UTF-8; an upstream that honours the
		// charset (body-parser decodes utf-7, utf-16) would read other
		// values than the ones counted.
		return needs, &reply.Failure{Status: http.StatusUnsupportedMediaType, Reason: fmt.Sprintf("request body declares charset %q; the frequency cap reads bodies as UTF-8 (an upstream that decodes another charset would read other values than the ones counted): send it as UTF-8", cs)}
	}
	isJSON := err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
	isForm := err == nil && mt == "application/x-www-form-urlencoded"
	switch {
	case isJSON && needs&needJSON != 0:
		return needs &^ needForm, nil
	case isForm && needs&needForm != 0:
		return needs &^ needJSON, nil
	}
	want := "application/json"
	if needs&needJSON == 0 {
		want = "application/x-www-form-urlencoded"
	} else if needs&needForm != 0 {
		want += " or application/x-www-form-urlencoded"
	}
	if err != nil {
		// Readers differ on a type that does not parse (Go's refuses it,
		// others take what comes before the ";"), so telling the sender
		// to send the type it named would not help.
		return needs, &reply.Failure{Status: http.StatusUnsupportedMediaType, Reason: fmt.Sprintf("request body declares Content-Type %q, which does not parse (%v), and readers differ on what it names; send a well-formed %s", contentType, err, want)}
	}
	return needs, &reply.Failure{Status: http.StatusUnsupportedMediaType, Reason: fmt.Sprintf("request body declares Content-Type %q, but the frequency cap reads it as %s (an upstream that parses by Content-Type would read other values than the ones counted); send it as %s, or set any_content_type when the upstream reads it so whatever the type", contentType, want, want)}
}

// firstRead is the most readAtMost allocates before the bytes arrive:
// enough for a batch of 500 push messages in one piece (grown by doubling,
// such a body was copied three times).
const firstRead = 64 << 10

// readAtMost reads the body, and one byte more than maxBody if it is
// longer. It is io.ReadAll with a first buffer the size of the declared
// length (and one byte to see the end in), up to firstRead: io.ReadAll
// starts at 512 bytes, several times a push body. The cap keeps a sender
// from making the gateway hold max_body bytes for a body it declares and
// never sends.
func readAtMost(r *http.Request, maxBody int64) ([]byte, error) {
	body := io.LimitReader(r.Body, maxBody+1)
	size := int64(512)
	if n := r.ContentLength; n >= 0 && n <= maxBody {
		size = min(n+1, firstRead)
	}
	b := make([]byte, 0, size)
	for {
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // more than declared: grow
		}
	}
}

// replayBody serves the bytes already read and closes the original body.
type replayBody struct {
	io.Reader
	io.Closer
}

func tooLarge(limit int64) *reply.Failure {
	return &reply.Failure{Status: http.StatusRequestEntityTooLarge, Reason: fmt.Sprintf("request body is larger than max_body (%d bytes)", limit)}
}
