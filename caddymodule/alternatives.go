package caddymodule

import (
	"fmt"
	"strings"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// The readers of body fields, read per entry as a batch dimension, never
// by the replacer: {fcm_topics.message.condition} reads an FCM topic
// condition, one entry per topic it names; {fcm_topic.message.topic} an
// FCM topic field, without the "/topics/" prefix the Admin SDKs strip;
// {email.personalizations.*.to.*.email} an email address, as the mailbox
// it names (trimmed, in lower case); {device_token.notifications.*.tokens.*}
// a device token, an APNs one in lower case.
var readers = map[string]*jsonbatch.Reader{
	jsonbatch.FCMTopics.Name:    jsonbatch.FCMTopics,
	jsonbatch.FCMTopic.Name:     jsonbatch.FCMTopic,
	jsonbatch.EmailAddress.Name: jsonbatch.EmailAddress,
	jsonbatch.DeviceToken.Name:  jsonbatch.DeviceToken,
}

// readerNames are the readers' placeholder names, for messages.
const readerNames = "{fcm_topics.<path>}, {fcm_topic.<path>}, {email.<path>} or {device_token.<path>}"

// hasReader reports whether expr uses a reader's placeholder.
func hasReader(expr string) bool {
	for name := range readers {
		if strings.Contains(expr, "{"+name+".") {
			return true
		}
	}
	return false
}

// readerPaths returns the paths of expr's reader placeholders.
func readerPaths(expr string) []string {
	var out []string
	for name := range readers {
		out = append(out, placeholderArgs(expr, name)...)
	}
	return out
}

// hasDim reports whether name is declared, in Dimensions or
// DimensionAlternatives.
func (h *Handler) hasDim(name string) bool {
	if _, ok := h.Dimensions[name]; ok {
		return true
	}
	_, ok := h.DimensionAlternatives[name]
	return ok
}

// dimExpr is the expression of a declared dimension: its placeholder, or
// its alternatives' separated by spaces, as the Caddyfile writes them
// (for the body needs, answers and the admin API; never replaced as one).
func (h *Handler) dimExpr(name string) string {
	if alts, ok := h.DimensionAlternatives[name]; ok {
		return strings.Join(alts, " ")
	}
	return h.Dimensions[name]
}

// dimBatchPath returns the batch path of a declared dimension: its
// alternatives', its {fcm_topics.*} field's or its wildcard {json.*}
// path; nil when it has none of them.
func (h *Handler) dimBatchPath(name string) (*jsonbatch.Path, error) {
	if alts, ok := h.DimensionAlternatives[name]; ok {
		return alternativesPath(alts)
	}
	return batchPathOf(h.Dimensions[name])
}

// alternativesPath checks the alternatives of a dimension and returns
// their path.
func alternativesPath(alts []string) (*jsonbatch.Path, error) {
	if len(alts) < 2 {
		return nil, fmt.Errorf("alternatives need two placeholders or more (one is a plain dimension)")
	}
	paths := make([]*jsonbatch.Path, len(alts))
	for i, a := range alts {
		p, ok, err := fieldPath(a)
		switch {
		case err != nil:
			return nil, err
		case !ok:
			return nil, fmt.Errorf("alternative %q is not one {json.<path>}, %s placeholder: alternatives are body fields", a, readerNames)
		}
		paths[i] = p
	}
	return jsonbatch.Alternatives(paths...)
}

// batchPathOf returns the batch path of a one-expression dimension: a
// reader's field ({fcm_topics.*}, {fcm_topic.*}), or a wildcard
// {json.*} path's; nil for neither.
func batchPathOf(expr string) (*jsonbatch.Path, error) {
	if hasReader(expr) {
		p, ok, err := fieldPath(expr)
		if err == nil && !ok {
			err = fmt.Errorf("%q: a %s placeholder must be the whole expression", expr, readerNames)
		}
		return p, err
	}
	return wildcardPath(expr)
}

// fieldPath parses expr when it is exactly one {json.<path>} placeholder
// or one of a reader (ok), the path then read by that reader.
func fieldPath(expr string) (p *jsonbatch.Path, ok bool, err error) {
	e := strings.TrimSpace(expr)
	inner, found := strings.CutSuffix(e, "}")
	if !found || !strings.HasPrefix(e, "{") || strings.Count(e, "{") != 1 || strings.Count(e, "}") != 1 {
		return nil, false, nil
	}
	kind, path, found := strings.Cut(inner[1:], ".")
	r, isReader := readers[kind]
	if !found || (kind != "json" && !isReader) {
		return nil, false, nil
	}
	if p, err = jsonbatch.ParsePath(path); err != nil {
		return nil, true, fmt.Errorf("%q: %w", expr, err)
	}
	if isReader {
		p = p.WithReader(r)
	}
	return p, true, nil
}

// declaredDims maps every declared dimension to its expression (see
// dimExpr), for the admin API and the console.
func (h *Handler) declaredDims() map[string]string {
	if len(h.DimensionAlternatives) == 0 {
		return h.Dimensions
	}
	out := make(map[string]string, len(h.Dimensions)+len(h.DimensionAlternatives))
	for name, expr := range h.Dimensions {
		out[name] = expr
	}
	for name := range h.DimensionAlternatives {
		out[name] = h.dimExpr(name)
	}
	return out
}

// rejectsMissing reports whether a missing value of dimension di is a
// 400: under on_missing reject, unless di is in SkipMissing.
func (h *Handler) rejectsMissing(di int) bool {
	return h.OnMissing == OnMissingReject && !h.skipDims[di]
}

// lookupForm is capset.Dimension.Lookup for a dimension read as expr: a
// value given to the admin API or the console is read as the gateway reads
// the body's. An {email.*} dimension counts the mailbox; one of topics
// ({fcm_topic.*}, {fcm_topics.*}: a lookup names one topic) the topic,
// checked; and one whose alternatives mix topics with plain fields (the
// gorush example's tokens, to, topic and condition) the value without
// FCM's /topics/ prefix, which no token has. nil when nothing rewrites.
func lookupForm(expr string) func(string) (string, error) {
	if wholeLower(expr) {
		return func(v string) (string, error) { return strings.ToLower(v), nil }
	}
	email := len(placeholderArgs(expr, jsonbatch.EmailAddress.Name)) > 0
	topics := len(placeholderArgs(expr, jsonbatch.FCMTopic.Name))+len(placeholderArgs(expr, jsonbatch.FCMTopics.Name)) > 0
	plain := len(placeholderArgs(expr, "json")) > 0
	if len(placeholderArgs(expr, jsonbatch.DeviceToken.Name)) > 0 && !email {
		// An APNs token is looked up in lower case; a topic given for the
		// same dimension without its /topics/ prefix (no topic name is an
		// APNs token).
		return func(v string) (string, error) {
			if topics {
				v = strings.TrimPrefix(v, "/topics/")
			}
			return jsonbatch.DeviceTokenKey(v), nil
		}
	}
	one := func(r *jsonbatch.Reader) func(string) (string, error) {
		return func(v string) (string, error) {
			got, err := r.Read(v)
			if err != nil {
				return "", err
			}
			if len(got) != 1 {
				return "", fmt.Errorf("%q names %d values", v, len(got))
			}
			return got[0], nil
		}
	}
	switch {
	case email && !topics && !plain:
		return one(jsonbatch.EmailAddress)
	case topics && !email && !plain:
		topic := one(jsonbatch.FCMTopic)
		return func(v string) (string, error) {
			if v == jsonbatch.OpenAudience && len(placeholderArgs(expr, jsonbatch.FCMTopics.Name)) > 0 {
				// What a condition reaches outside its topics: no
				// topic name, but counted under this dimension.
				return v, nil
			}
			return topic(v)
		}
	case topics && !email:
		return func(v string) (string, error) { return strings.TrimPrefix(v, "/topics/"), nil }
	}
	return nil
}
