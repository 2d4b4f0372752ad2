package jsonbatch

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Reader reads one value a path names as several: each is an entry of
// its own, at the value's place (see Path.WithReader).
type Reader struct {
	// Name is how a config names the reader ("fcm_topics").
	Name string
	Read func(text string) ([]string, error)
}

// FCMTopics reads an FCM topic condition as the topics it names (see
// FCMConditionTopics).
var FCMTopics = &Reader{Name: "fcm_topics", Read: FCMConditionTopics}

// FCMTopic reads an FCM topic field as the topic it names (see
// FCMTopicName).
var FCMTopic = &Reader{Name: "fcm_topic", Read: func(text string) ([]string, error) {
	name, err := FCMTopicName(text)
	if err != nil {
		return nil, err
	}
	return []string{name}, nil
}}

// FCMTopicName returns the topic a message's topic field names: the text
// without the "/topics/" prefix that FCM's Admin SDKs strip before they
// send it (so "/topics/news" through gorush is "news"), refused when it is
// no topic name (see FCMConditionTopics), which FCM refuses too.
func FCMTopicName(topic string) (string, error) {
	name := strings.TrimPrefix(topic, "/topics/")
	for i := 0; i < len(name); {
		n := topicRune(name[i:])
		if n == 0 {
			return "", fmt.Errorf("topic %q is not a topic name ([a-zA-Z0-9-_.~%%]+)", topic)
		}
		i += n
	}
	if name == "" {
		return "", fmt.Errorf("topic %q is not a topic name ([a-zA-Z0-9-_.~%%]+)", topic)
	}
	return name, nil
}

// WithReader returns p whose every value is read by r.
func (p *Path) WithReader(r *Reader) *Path {
	q := *p
	q.reader = r
	return &q
}

// maxConditionDepth bounds the nesting of a condition's parentheses and
// negations, so that a hostile one costs no deep stack (FCM itself takes
// five topics at most).
const maxConditionDepth = 32

// FCMConditionTopics returns the topics that an FCM message's condition
// names, each once, in the order they first appear: "'a' in topics &&
// ('b' in topics || 'c' in topics)" names a, b and c. A topic the
// message spares is left out (see audience): "'a' in topics && !('b' in
// topics)" is a's alone; a condition that reaches devices outside its
// topics ("!('b' in topics)") names OpenAudience too. The grammar is
// FCM's:
//
//	cond  = or
//	or    = and *( "||" and )
//	and   = not *( "&&" not )
//	not   = "!" not / "(" or ")" / topic "in" "topics"
//	topic = "'" name "'" / DQUOTE name DQUOTE
//	name  = 1*( ALPHA / DIGIT / "-" / "_" / "." / "~" / "%" / U+4E00-U+9FA5 )
//
// with spaces, tabs and line breaks allowed between the parts. Anything
// else is an error that says where it is, so that no spelling of a
// condition passes without its topics counted: the same topics respelled
// (other quotes, spaces, order or parentheses) are the same topics. The
// CJK ideographs are HMS's (Huawei's push reads the same grammar, and
// gorush passes its conditions on); FCM refuses them itself.
func FCMConditionTopics(cond string) ([]string, error) {
	c := condParser{s: cond}
	root := c.or(0)
	if c.err == nil {
		c.space()
		if c.i < len(c.s) {
			c.fail("&&, || or the end")
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	return audience(root), nil
}

// condNode is a parsed condition: a topic ('t', name), a negation ('!'),
// or the and ('&') or or ('|') of kids. Parentheses leave no node.
type condNode struct {
	op   byte
	name string
	kids []*condNode
}

// OpenAudience is the entry that stands for the devices a condition
// reaches outside every topic it names: "!('x' in topics)" reaches the
// subscribers of every other topic, so a sender who named a new x each
// time would reach nearly everyone without any count. Every such
// condition counts as this one entry, whatever topics it names. No topic
// name can be "*" (see topicRune), so it is no topic's count.
const OpenAudience = "*"

// audience returns the topics root names, each once in the order they
// first appear, but those whose subscribers it spares: a topic whose
// every mention is a negated conjunct of the whole condition (root is
// "… && !('t' in topics)", so no subscriber of t gets the message).
// Any other negation may still reach a topic's subscribers ("!('a' in
// topics && 'b' in topics)" reaches a's outside b), so it counts. Last
// comes OpenAudience when the condition holds for a device subscribed to
// none of its topics (it holds with every topic false).
func audience(root *condNode) []string {
	var all []string
	mentions := map[string]int{}
	var walk func(n *condNode)
	walk = func(n *condNode) {
		if n.op == 't' {
			if mentions[n.name] == 0 {
				all = append(all, n.name)
			}
			mentions[n.name]++
		}
		for _, k := range n.kids {
			walk(k)
		}
	}
	walk(root)
	spared := map[string]int{}
	var conjuncts func(n *condNode)
	conjuncts = func(n *condNode) {
		switch {
		case n.op == '&':
			for _, k := range n.kids {
				conjuncts(k)
			}
		case n.op == '!' && n.kids[0].op == 't':
			spared[n.kids[0].name]++
		}
	}
	conjuncts(root)
	var out []string
	for _, t := range all {
		if spared[t] < mentions[t] {
			out = append(out, t)
		}
	}
	if holdsOutsideItsTopics(root) {
		out = append(out, OpenAudience)
	}
	return out
}

// holdsOutsideItsTopics reports whether n holds for a device subscribed
// to none of the topics it names: n's value with every topic false.
func holdsOutsideItsTopics(n *condNode) bool {
	switch n.op {
	case '!':
		return !holdsOutsideItsTopics(n.kids[0])
	case '&':
		for _, k := range n.kids {
			if !holdsOutsideItsTopics(k) {
				return false
			}
		}
		return true
	case '|':
		for _, k := range n.kids {
			if holdsOutsideItsTopics(k) {
				return true
			}
		}
		return false
	}
	return false // a topic
}

var errEmptyCondition = errors.New("empty topic condition")

// condParser is one recursive-descent parse of a condition.
type condParser struct {
	s   string
	i   int
	err error
}

func (c *condParser) fail(want string) {
	if c.err != nil {
		return
	}
	if c.i >= len(c.s) {
		c.err = fmt.Errorf("topic condition %q: expected %s at its end", c.s, want)
		return
	}
	c.err = fmt.Errorf("topic condition %q: expected %s at offset %d", c.s, want, c.i)
}

func (c *condParser) space() {
	for c.i < len(c.s) && (c.s[c.i] == ' ' || c.s[c.i] == '\t' || c.s[c.i] == '\n' || c.s[c.i] == '\r') {
		c.i++
	}
}

// op consumes the two-byte operator tok after spaces, if it is next.
func (c *condParser) op(tok string) bool {
	c.space()
	if len(c.s)-c.i >= len(tok) && c.s[c.i:c.i+len(tok)] == tok {
		c.i += len(tok)
		return true
	}
	return false
}

func (c *condParser) or(depth int) *condNode  { return c.chain(depth, "||", '|', c.and) }
func (c *condParser) and(depth int) *condNode { return c.chain(depth, "&&", '&', c.not) }

// chain reads term, then more of them each after tok, as one node of op
// (a term that is a parenthesized node of op already takes the others:
// both operators are associative).
func (c *condParser) chain(depth int, tok string, op byte, term func(int) *condNode) *condNode {
	n := term(depth)
	for c.err == nil && c.op(tok) {
		if n.op != op {
			n = &condNode{op: op, kids: []*condNode{n}}
		}
		n.kids = append(n.kids, term(depth))
	}
	return n
}

// not returns a node even on an error (c.err), so that callers need not
// check for nil.
func (c *condParser) not(depth int) *condNode {
	if depth > maxConditionDepth {
		c.err = fmt.Errorf("topic condition nests deeper than %d", maxConditionDepth)
		return &condNode{}
	}
	c.space()
	if c.i >= len(c.s) {
		if len(c.s) == 0 {
			c.err = errEmptyCondition
			return &condNode{}
		}
		c.fail("a topic, ! or (")
		return &condNode{}
	}
	switch c.s[c.i] {
	case '!':
		c.i++
		return &condNode{op: '!', kids: []*condNode{c.not(depth + 1)}}
	case '(':
		c.i++
		n := c.or(depth + 1)
		if c.err == nil && !c.op(")") {
			c.fail(")")
		}
		return n
	case '\'', '"':
		return c.topic()
	}
	c.fail("a topic, ! or (")
	return &condNode{}
}

// topic reads "'name' in topics".
func (c *condParser) topic() *condNode {
	q := c.s[c.i]
	c.i++
	start := c.i
	for c.i < len(c.s) {
		n := topicRune(c.s[c.i:])
		if n == 0 {
			break
		}
		c.i += n
	}
	if c.i == start || c.i >= len(c.s) || c.s[c.i] != q {
		c.fail("a topic name ([a-zA-Z0-9-_.~%]+) and its closing quote")
		return &condNode{}
	}
	name := c.s[start:c.i]
	c.i++
	if !c.word("in", true) || !c.word("topics", false) {
		c.fail("in topics")
		return &condNode{}
	}
	return &condNode{op: 't', name: name}
}

// word consumes w after optional spaces; with sep, it must be followed by
// a space (as "in" is, before "topics"); either way not by a name byte.
func (c *condParser) word(w string, sep bool) bool {
	c.space()
	if len(c.s)-c.i < len(w) || c.s[c.i:c.i+len(w)] != w {
		return false
	}
	j := c.i + len(w)
	if topicRune(c.s[j:]) > 0 {
		return false
	}
	if sep && (j >= len(c.s) || (c.s[j] != ' ' && c.s[j] != '\t' && c.s[j] != '\n' && c.s[j] != '\r')) {
		return false
	}
	c.i = j
	return true
}

// topicRune returns the length of the rune s starts with when it may be
// part of a topic name (FCM's [a-zA-Z0-9-_.~%], and HMS's CJK ideographs
// U+4E00 to U+9FA5), else 0.
func topicRune(s string) int {
	if s == "" {
		return 0
	}
	if s[0] < utf8.RuneSelf {
		if isTopicByte(s[0]) {
			return 1
		}
		return 0
	}
	r, n := utf8.DecodeRuneInString(s)
	if r >= 0x4E00 && r <= 0x9FA5 {
		return n
	}
	return 0
}

// isTopicByte reports whether the ASCII byte b may be part of a topic
// name: [a-zA-Z0-9-_.~%].
func isTopicByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' ||
		b == '-' || b == '_' || b == '.' || b == '~' || b == '%'
}
