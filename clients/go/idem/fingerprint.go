package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Fingerprint is the lowercase hex SHA-256 of b (64 characters), the fingerprint
// idem's own tools make of a request's bytes.
func Fingerprint(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// FingerprintJSON is the Fingerprint of v's canonical JSON (see CanonicalJSON; the
// form every idem client fingerprints, clients/CASES.md). Two encodings of the same
// value (members in another order, other spacing) have the same fingerprint. v is raw
// JSON ([]byte, json.RawMessage) or any value encoding/json encodes (its numbers as
// encoding/json writes them).
func FingerprintJSON(v any) (string, error) {
	var raw []byte
	switch x := v.(type) {
	case []byte:
		raw = x
	case json.RawMessage:
		raw = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return "", fmt.Errorf("idem: fingerprint: %w", err)
		}
		raw = b
	}
	canonical, err := CanonicalJSON(raw)
	if err != nil {
		return "", err
	}
	return Fingerprint(canonical), nil
}

// CanonicalJSON re-encodes one JSON value in the canonical form every idem client
// writes (clients/CASES.md): no white space; object members sorted by the code points
// of their names, a name given twice keeping its last value; numbers as written;
// strings with the short escapes \" \\ \b \f \n \r \t, other characters below
// U+0020 as \u00xx, every other character as itself in UTF-8. It does not depend on
// encoding/json's string escaping, which differs between Go versions. Errors: not one
// JSON value, text that is not UTF-8, a lone surrogate escape (each naming the offset).
func CanonicalJSON(raw []byte) ([]byte, error) {
	return canonicalize(raw, false)
}

// canonicalize writes raw's one JSON value in the clients' canonical form, or in RFC
// 8785's (rfc8785JSON).
func canonicalize(raw []byte, rfc8785 bool) ([]byte, error) {
	p := canonParser{in: raw, rfc8785: rfc8785}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.pos != len(raw) {
		return nil, p.fail("more than one value")
	}
	var out bytes.Buffer
	v.write(&out)
	return out.Bytes(), nil
}

// canonMaxDepth bounds the nesting CanonicalJSON follows (the stack it may use).
const canonMaxDepth = 512

// rfc8785JSON is raw's RFC 8785 form (JSON Canonicalization Scheme), the one idem
// proxy --fingerprint json digests a request body by, so the middleware's fingerprints
// are the proxy's: members sorted by the UTF-16 code units of their names, numbers as
// ECMAScript prints the IEEE 754 double (12.50 is 12.5, 1e21 is 1e+21), strings as
// CanonicalJSON writes them. It refuses what the proxy does not canonicalise: not one
// JSON value, text that is not UTF-8, a lone surrogate, a member name given twice, a
// number past a double's range or an integer past 64 bits, a non-empty array or object
// nested 1024 deep.
func rfc8785JSON(raw []byte) ([]byte, error) {
	return canonicalize(raw, true)
}

// rfc8785MaxDepth: the proxy's parser (simdjson) refuses a non-empty array or object
// this deep (the outermost is 1).
const rfc8785MaxDepth = 1024

// canonValue is a parsed JSON value: an object (members, names unique and sorted),
// an array, a string, or a number/literal kept as its text.
type canonValue struct {
	kind    byte // '{', '[', '"', or 'l' (number, true, false, null)
	text    string
	items   []canonValue
	members []canonMember
}

type canonMember struct {
	name  string
	value canonValue
}

func (v *canonValue) write(b *bytes.Buffer) {
	switch v.kind {
	case 'l':
		b.WriteString(v.text)
	case '"':
		canonQuote(b, v.text)
	case '[':
		b.WriteByte('[')
		for i := range v.items {
			if i > 0 {
				b.WriteByte(',')
			}
			v.items[i].write(b)
		}
		b.WriteByte(']')
	case '{':
		b.WriteByte('{')
		for i := range v.members {
			if i > 0 {
				b.WriteByte(',')
			}
			canonQuote(b, v.members[i].name)
			b.WriteByte(':')
			v.members[i].value.write(b)
		}
		b.WriteByte('}')
	}
}

// canonQuote writes s (valid UTF-8) as a canonical JSON string.
func canonQuote(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

type canonParser struct {
	in      []byte
	pos     int
	rfc8785 bool // RFC 8785's numbers, member order and refusals (rfc8785JSON)
}

func (p *canonParser) fail(what string) error {
	return fmt.Errorf("idem: not JSON: %s at offset %d", what, p.pos)
}

func (p *canonParser) space() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// take skips white space, then c when it comes next, saying whether it did.
func (p *canonParser) take(c byte) bool {
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == c {
		p.pos++
		return true
	}
	return false
}

func (p *canonParser) value(depth int) (canonValue, error) {
	if depth > canonMaxDepth && !p.rfc8785 {
		return canonValue{}, p.fail(fmt.Sprintf("nesting deeper than %d", canonMaxDepth))
	}
	if p.pos >= len(p.in) {
		return canonValue{}, p.fail("unexpected end")
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(depth)
	case c == '[':
		return p.array(depth)
	case c == '"':
		s, err := p.str()
		return canonValue{kind: '"', text: s}, err
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	for _, lit := range []string{"true", "false", "null"} {
		if bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
			p.pos += len(lit)
			return canonValue{kind: 'l', text: lit}, nil
		}
	}
	return canonValue{}, p.fail(fmt.Sprintf("unexpected %q", p.in[p.pos]))
}

func (p *canonParser) object(depth int) (canonValue, error) {
	p.pos++ // {
	index := map[string]int{}
	v := canonValue{kind: '{'}
	if p.take('}') {
		return v, nil
	}
	if err := p.rfc8785Depth(depth); err != nil {
		return v, err
	}
	for {
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return v, p.fail("expected a member name")
		}
		name, err := p.str()
		if err != nil {
			return v, err
		}
		if !p.take(':') {
			return v, p.fail("expected ':'")
		}
		p.space()
		member, err := p.value(depth + 1)
		if err != nil {
			return v, err
		}
		if i, seen := index[name]; seen && p.rfc8785 {
			return v, p.fail(fmt.Sprintf("the member name %q given twice", name))
		} else if seen {
			v.members[i].value = member // a name given twice: the last value
		} else {
			index[name] = len(v.members)
			v.members = append(v.members, canonMember{name, member})
		}
		if p.take(',') {
			continue
		}
		if !p.take('}') {
			return v, p.fail("expected ',' or '}'")
		}
		if p.rfc8785 {
			sort.Slice(v.members, func(i, j int) bool {
				return utf16Less(v.members[i].name, v.members[j].name)
			})
			return v, nil
		}
		// Go strings compare as UTF-8 bytes: code point order.
		sort.Slice(v.members, func(i, j int) bool { return v.members[i].name < v.members[j].name })
		return v, nil
	}
}

func (p *canonParser) array(depth int) (canonValue, error) {
	p.pos++ // [
	v := canonValue{kind: '['}
	if p.take(']') {
		return v, nil
	}
	if err := p.rfc8785Depth(depth); err != nil {
		return v, err
	}
	for {
		p.space()
		item, err := p.value(depth + 1)
		if err != nil {
			return v, err
		}
		v.items = append(v.items, item)
		if p.take(',') {
			continue
		}
		if !p.take(']') {
			return v, p.fail("expected ',' or ']'")
		}
		return v, nil
	}
}

func (p *canonParser) digits() int {
	start := p.pos
	for p.pos < len(p.in) && p.in[p.pos] >= '0' && p.in[p.pos] <= '9' {
		p.pos++
	}
	return p.pos - start
}

// number takes RFC 8259's number grammar and keeps its text.
func (p *canonParser) number() (canonValue, error) {
	start := p.pos
	if p.in[p.pos] == '-' {
		p.pos++
	}
	if p.pos < len(p.in) && p.in[p.pos] == '0' {
		p.pos++
	} else if p.digits() == 0 {
		return canonValue{}, p.fail("bad number")
	}
	if p.pos < len(p.in) && p.in[p.pos] == '.' {
		p.pos++
		if p.digits() == 0 {
			return canonValue{}, p.fail("bad number")
		}
	}
	if p.pos < len(p.in) && (p.in[p.pos] == 'e' || p.in[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.in) && (p.in[p.pos] == '+' || p.in[p.pos] == '-') {
			p.pos++
		}
		if p.digits() == 0 {
			return canonValue{}, p.fail("bad number")
		}
	}
	text := string(p.in[start:p.pos])
	if p.rfc8785 {
		var err error
		if text, err = ecmaNumber(text); err != nil {
			p.pos = start
			return canonValue{}, p.fail(err.Error())
		}
	}
	return canonValue{kind: 'l', text: text}, nil
}

// rfc8785Depth refuses a non-empty array or object at depth (its parent's depth + 1,
// the outermost 0) that the proxy's parser refuses.
func (p *canonParser) rfc8785Depth(depth int) error {
	if p.rfc8785 && depth+1 >= rfc8785MaxDepth {
		return p.fail(fmt.Sprintf("nesting %d deep", rfc8785MaxDepth))
	}
	return nil
}

// utf16Less orders a before b by their UTF-16 code units (RFC 8785's member order:
// U+1F600, a surrogate pair, before U+E000).
func utf16Less(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

// ecmaNumber is a JSON number (valid RFC 8259 text) as ECMAScript's Number::toString
// prints the nearest IEEE 754 double, as RFC 8785 prescribes: the shortest digits that
// round-trip, fixed notation for decimal exponents -7 < e < 21, else d.ddde±n; -0 is 0.
// Refused as the proxy's parser refuses them: past a double's range, and an integer
// (no fraction, no exponent) outside int64 and uint64.
func ecmaNumber(text string) (string, error) {
	if !strings.ContainsAny(text, ".eE") {
		_, errSigned := strconv.ParseInt(text, 10, 64)
		_, errUnsigned := strconv.ParseUint(text, 10, 64)
		if errSigned != nil && errUnsigned != nil {
			return "", fmt.Errorf("the integer %s past 64 bits", text)
		}
	}
	f, err := strconv.ParseFloat(text, 64)
	if math.IsInf(f, 0) {
		return "", fmt.Errorf("the number %s past a double's range", text)
	} else if err != nil && !errors.Is(err, strconv.ErrRange) { // an underflow is 0
		return "", err
	}
	if f == 0 {
		return "0", nil
	}
	sign := ""
	if f < 0 {
		sign, f = "-", -f
	}
	// d.ddde±x: the digits and the exponent n of f = 0.digits × 10^n.
	sci := strconv.FormatFloat(f, 'e', -1, 64)
	mark := strings.IndexByte(sci, 'e')
	digits := strings.Replace(sci[:mark], ".", "", 1)
	exp, err := strconv.Atoi(sci[mark+1:])
	if err != nil {
		return "", err
	}
	k, n := len(digits), exp+1
	switch {
	case k <= n && n <= 21:
		return sign + digits + strings.Repeat("0", n-k), nil
	case 0 < n && n <= 21:
		return sign + digits[:n] + "." + digits[n:], nil
	case -6 < n && n <= 0:
		return sign + "0." + strings.Repeat("0", -n) + digits, nil
	}
	mantissa := digits[:1]
	if k > 1 {
		mantissa += "." + digits[1:]
	}
	if n-1 < 0 {
		return sign + mantissa + "e" + strconv.Itoa(n-1), nil // 1e-7
	}
	return sign + mantissa + "e+" + strconv.Itoa(n-1), nil // 1e+21
}

// hex4 reads the 4 hex digits of a \u escape at p.pos.
func (p *canonParser) hex4() (rune, error) {
	if p.pos+4 > len(p.in) {
		return 0, p.fail("a bad \\u escape")
	}
	var r rune
	for _, c := range p.in[p.pos : p.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, p.fail("a bad \\u escape")
		}
	}
	p.pos += 4
	return r, nil
}

// str decodes the string at p.pos (its opening quote).
func (p *canonParser) str() (string, error) {
	p.pos++ // "
	var b strings.Builder
	for {
		if p.pos >= len(p.in) {
			return "", p.fail("unterminated string")
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return b.String(), nil
		case c < 0x20:
			return "", p.fail("a control character in a string")
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && n == 1 {
				return "", p.fail("text that is not UTF-8")
			}
			b.Write(p.in[p.pos : p.pos+n])
			p.pos += n
		case c != '\\':
			b.WriteByte(c)
			p.pos++
		default:
			if err := p.escape(&b); err != nil {
				return "", err
			}
		}
	}
}

// escape decodes the escape at p.pos (its backslash) into b.
func (p *canonParser) escape(b *strings.Builder) error {
	at := p.pos
	if p.pos+1 >= len(p.in) {
		return p.fail("unterminated string")
	}
	e := p.in[p.pos+1]
	p.pos += 2
	if short := strings.IndexByte(`"\/bfnrt`, e); short >= 0 {
		b.WriteByte("\"\\/\b\f\n\r\t"[short])
		return nil
	}
	if e != 'u' {
		p.pos = at
		return p.fail(fmt.Sprintf("a bad escape \\%c", e))
	}
	r, err := p.hex4()
	if err != nil {
		return err
	}
	if utf16.IsSurrogate(r) {
		lone := fmt.Errorf("idem: not JSON: a lone surrogate \\u%04x at offset %d", r, at)
		if r >= 0xdc00 || !bytes.HasPrefix(p.in[p.pos:], []byte(`\u`)) {
			return lone
		}
		p.pos += 2
		low, err := p.hex4()
		if err != nil {
			return err
		}
		if r = utf16.DecodeRune(r, low); r == utf8.RuneError {
			return lone
		}
	}
	b.WriteRune(r)
	return nil
}
