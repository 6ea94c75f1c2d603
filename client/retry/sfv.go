package retry

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A small parser for RFC 9651 (Structured Field Values) Lists, enough to
// read the RateLimit field: every bare item type is parsed (so a valid
// field is never refused), and a field that fails to parse is ignored as a
// whole, as §4.2 requires.

type sfKind uint8

const (
	sfInteger sfKind = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
	sfDate
	sfDisplayString
)

type sfItem struct {
	kind sfKind
	i    int64 // integer, date
	f    float64
	s    string // string, token, display string
	b    []byte
	bl   bool
}

type sfParam struct {
	key string
	val sfItem
}

type sfMember struct {
	item   sfItem   // for an item
	inner  []sfItem // for an inner list (its items' parameters are dropped)
	isList bool
	params []sfParam
}

func (m sfMember) param(key string) (sfItem, bool) {
	// The last occurrence of a key wins (§4.2.3.2 overwrites).
	var out sfItem
	found := false
	for _, p := range m.params {
		if p.key == key {
			out, found = p.val, true
		}
	}
	return out, found
}

var errSF = errors.New("invalid structured field")

type sfParser struct {
	s   string
	pos int
}

func (p *sfParser) eof() bool  { return p.pos >= len(p.s) }
func (p *sfParser) peek() byte { return p.s[p.pos] }

func (p *sfParser) skipSP() {
	for !p.eof() && p.peek() == ' ' {
		p.pos++
	}
}

func (p *sfParser) skipOWS() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.pos++
	}
}

// parseSFList parses the field's lines (combined as one with ", ").
func parseSFList(lines []string) ([]sfMember, error) {
	p := &sfParser{s: strings.Trim(strings.Join(lines, ", "), " \t")}
	var out []sfMember
	for !p.eof() {
		m, err := p.member()
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		p.skipOWS()
		if p.eof() {
			return out, nil
		}
		if p.peek() != ',' {
			return nil, errSF
		}
		p.pos++
		p.skipOWS()
		if p.eof() {
			return nil, errSF // trailing comma
		}
	}
	return out, nil
}

func (p *sfParser) member() (sfMember, error) {
	var m sfMember
	if p.peek() == '(' {
		p.pos++
		m.isList = true
		for {
			p.skipSP()
			if p.eof() {
				return m, errSF
			}
			if p.peek() == ')' {
				p.pos++
				break
			}
			it, err := p.bareItem()
			if err != nil {
				return m, err
			}
			if _, err := p.params(); err != nil {
				return m, err
			}
			m.inner = append(m.inner, it)
			if p.eof() || (p.peek() != ' ' && p.peek() != ')') {
				return m, errSF
			}
		}
	} else {
		it, err := p.bareItem()
		if err != nil {
			return m, err
		}
		m.item = it
	}
	ps, err := p.params()
	m.params = ps
	return m, err
}

func (p *sfParser) params() ([]sfParam, error) {
	var out []sfParam
	for !p.eof() && p.peek() == ';' {
		p.pos++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		v := sfItem{kind: sfBoolean, bl: true}
		if !p.eof() && p.peek() == '=' {
			p.pos++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		out = append(out, sfParam{key: k, val: v})
	}
	return out, nil
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || (c >= 'A' && c <= 'Z') }

func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *sfParser) key() (string, error) {
	if p.eof() || !(isLCAlpha(p.peek()) || p.peek() == '*') {
		return "", errSF
	}
	start := p.pos
	for !p.eof() {
		c := p.peek()
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.pos++
	}
	return p.s[start:p.pos], nil
}

func (p *sfParser) bareItem() (sfItem, error) {
	if p.eof() {
		return sfItem{}, errSF
	}
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		s, err := p.str()
		return sfItem{kind: sfString, s: s}, err
	case c == '*' || isAlpha(c):
		start := p.pos
		p.pos++
		for !p.eof() && (isTChar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
			p.pos++
		}
		return sfItem{kind: sfToken, s: p.s[start:p.pos]}, nil
	case c == ':':
		p.pos++
		end := strings.IndexByte(p.s[p.pos:], ':')
		if end < 0 {
			return sfItem{}, errSF
		}
		raw := p.s[p.pos : p.pos+end]
		p.pos += end + 1
		b, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			return sfItem{}, errSF
		}
		return sfItem{kind: sfBytes, b: b}, nil
	case c == '?':
		p.pos++
		if p.eof() || (p.peek() != '0' && p.peek() != '1') {
			return sfItem{}, errSF
		}
		v := p.peek() == '1'
		p.pos++
		return sfItem{kind: sfBoolean, bl: v}, nil
	case c == '@':
		p.pos++
		it, err := p.number()
		if err != nil || it.kind != sfInteger {
			return sfItem{}, errSF
		}
		return sfItem{kind: sfDate, i: it.i}, nil
	case c == '%':
		p.pos++
		if p.eof() || p.peek() != '"' {
			return sfItem{}, errSF
		}
		s, err := p.displayString()
		return sfItem{kind: sfDisplayString, s: s}, err
	}
	return sfItem{}, errSF
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 1-3 fractional digits).
func (p *sfParser) number() (sfItem, error) {
	start := p.pos
	if p.peek() == '-' {
		p.pos++
	}
	digitsStart := p.pos
	for !p.eof() && isDigit(p.peek()) {
		p.pos++
	}
	intDigits := p.pos - digitsStart
	if intDigits == 0 {
		return sfItem{}, errSF
	}
	if p.eof() || p.peek() != '.' {
		if intDigits > 15 {
			return sfItem{}, errSF
		}
		v, err := strconv.ParseInt(p.s[start:p.pos], 10, 64)
		if err != nil {
			return sfItem{}, errSF
		}
		return sfItem{kind: sfInteger, i: v}, nil
	}
	if intDigits > 12 {
		return sfItem{}, errSF
	}
	p.pos++
	fracStart := p.pos
	for !p.eof() && isDigit(p.peek()) {
		p.pos++
	}
	if n := p.pos - fracStart; n < 1 || n > 3 {
		return sfItem{}, errSF
	}
	v, err := strconv.ParseFloat(p.s[start:p.pos], 64)
	if err != nil {
		return sfItem{}, errSF
	}
	return sfItem{kind: sfDecimal, f: v}, nil
}

func (p *sfParser) str() (string, error) {
	p.pos++ // opening quote
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		p.pos++
		switch {
		case c == '\\':
			if p.eof() || (p.peek() != '"' && p.peek() != '\\') {
				return "", errSF
			}
			b.WriteByte(p.peek())
			p.pos++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", errSF
		default:
			b.WriteByte(c)
		}
	}
	return "", errSF
}

func (p *sfParser) displayString() (string, error) {
	p.pos++ // opening quote
	var b []byte
	for !p.eof() {
		c := p.peek()
		p.pos++
		switch {
		case c == '%':
			if p.pos+2 > len(p.s) {
				return "", errSF
			}
			h := p.s[p.pos : p.pos+2]
			if strings.ToLower(h) != h {
				return "", errSF
			}
			v, err := strconv.ParseUint(h, 16, 8)
			if err != nil {
				return "", errSF
			}
			b = append(b, byte(v))
			p.pos += 2
		case c == '"':
			if !utf8.Valid(b) {
				return "", errSF
			}
			return string(b), nil
		case c < 0x20 || c > 0x7e:
			return "", errSF
		default:
			b = append(b, c)
		}
	}
	return "", errSF
}
