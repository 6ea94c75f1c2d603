// Package sfv parses RFC 9651 Structured Field Lists: enough to read the
// IETF RateLimit and RateLimit-Policy fields. One parser serves the retry
// helpers (reading a server's hints) and the middleware's tests (checking
// what it emits).
package sfv

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
// whole, as §4.2 requires. FuzzParseList holds it to an independent
// parser, github.com/dunglas/httpsfv (a test dependency only).

type Kind uint8

const (
	Integer Kind = iota + 1
	Decimal
	String
	Token
	Bytes
	Boolean
	Date
	DisplayString
)

type Item struct {
	Kind  Kind
	Int   int64 // Integer, Date
	Float float64
	Str   string // String, Token, DisplayString
	Bytes []byte
	Bool  bool
}

type Param struct {
	Key   string
	Value Item
}

type Member struct {
	Item   Item   // for an item
	Inner  []Item // for an inner list (its items' parameters are dropped)
	IsList bool
	Params []Param
}

// Param returns the member's parameter key (the last one wins, RFC 9651
// §4.2.3.2).
func (m Member) Param(key string) (Item, bool) {
	// The last occurrence of a key wins (§4.2.3.2 overwrites).
	var out Item
	found := false
	for _, p := range m.Params {
		if p.Key == key {
			out, found = p.Value, true
		}
	}
	return out, found
}

var ErrInvalid = errors.New("invalid structured field")

type parser struct {
	s   string
	pos int
}

func (p *parser) eof() bool  { return p.pos >= len(p.s) }
func (p *parser) peek() byte { return p.s[p.pos] }

func (p *parser) skipSP() {
	for !p.eof() && p.peek() == ' ' {
		p.pos++
	}
}

func (p *parser) skipOWS() {
	for !p.eof() && (p.peek() == ' ' || p.peek() == '\t') {
		p.pos++
	}
}

// ParseList parses the field's lines (combined as one with ", ").
func ParseList(lines []string) ([]Member, error) {
	p := &parser{s: strings.Trim(strings.Join(lines, ", "), " \t")}
	var out []Member
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
			return nil, ErrInvalid
		}
		p.pos++
		p.skipOWS()
		if p.eof() {
			return nil, ErrInvalid // trailing comma
		}
	}
	return out, nil
}

func (p *parser) member() (Member, error) {
	var m Member
	if p.peek() == '(' {
		p.pos++
		m.IsList = true
		for {
			p.skipSP()
			if p.eof() {
				return m, ErrInvalid
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
			m.Inner = append(m.Inner, it)
			if p.eof() || (p.peek() != ' ' && p.peek() != ')') {
				return m, ErrInvalid
			}
		}
	} else {
		it, err := p.bareItem()
		if err != nil {
			return m, err
		}
		m.Item = it
	}
	ps, err := p.params()
	m.Params = ps
	return m, err
}

func (p *parser) params() ([]Param, error) {
	var out []Param
	for !p.eof() && p.peek() == ';' {
		p.pos++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		v := Item{Kind: Boolean, Bool: true}
		if !p.eof() && p.peek() == '=' {
			p.pos++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		out = append(out, Param{Key: k, Value: v})
	}
	return out, nil
}

func isLCAlpha(c byte) bool { return c >= 'a' && c <= 'z' }
func isDigit(c byte) bool   { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool   { return isLCAlpha(c) || (c >= 'A' && c <= 'Z') }

func isTChar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func (p *parser) key() (string, error) {
	if p.eof() || !(isLCAlpha(p.peek()) || p.peek() == '*') {
		return "", ErrInvalid
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

func (p *parser) bareItem() (Item, error) {
	if p.eof() {
		return Item{}, ErrInvalid
	}
	switch c := p.peek(); {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		s, err := p.str()
		return Item{Kind: String, Str: s}, err
	case c == '*' || isAlpha(c):
		start := p.pos
		p.pos++
		for !p.eof() && (isTChar(p.peek()) || p.peek() == ':' || p.peek() == '/') {
			p.pos++
		}
		return Item{Kind: Token, Str: p.s[start:p.pos]}, nil
	case c == ':':
		p.pos++
		end := strings.IndexByte(p.s[p.pos:], ':')
		if end < 0 {
			return Item{}, ErrInvalid
		}
		raw := p.s[p.pos : p.pos+end]
		p.pos += end + 1
		// encoding/base64 skips CR and LF; RFC 9651 §4.2.7 allows only
		// the alphabet and '='.
		for i := 0; i < len(raw); i++ {
			if c := raw[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
				return Item{}, ErrInvalid
			}
		}
		b, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			return Item{}, ErrInvalid
		}
		return Item{Kind: Bytes, Bytes: b}, nil
	case c == '?':
		p.pos++
		if p.eof() || (p.peek() != '0' && p.peek() != '1') {
			return Item{}, ErrInvalid
		}
		v := p.peek() == '1'
		p.pos++
		return Item{Kind: Boolean, Bool: v}, nil
	case c == '@':
		p.pos++
		it, err := p.number()
		if err != nil || it.Kind != Integer {
			return Item{}, ErrInvalid
		}
		return Item{Kind: Date, Int: it.Int}, nil
	case c == '%':
		p.pos++
		if p.eof() || p.peek() != '"' {
			return Item{}, ErrInvalid
		}
		s, err := p.displayString()
		return Item{Kind: DisplayString, Str: s}, err
	}
	return Item{}, ErrInvalid
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// integer and 1-3 fractional digits). It may start at the end of the
// input (after a Date's '@').
func (p *parser) number() (Item, error) {
	start := p.pos
	if !p.eof() && p.peek() == '-' {
		p.pos++
	}
	digitsStart := p.pos
	for !p.eof() && isDigit(p.peek()) {
		p.pos++
	}
	intDigits := p.pos - digitsStart
	if intDigits == 0 {
		return Item{}, ErrInvalid
	}
	if p.eof() || p.peek() != '.' {
		if intDigits > 15 {
			return Item{}, ErrInvalid
		}
		v, err := strconv.ParseInt(p.s[start:p.pos], 10, 64)
		if err != nil {
			return Item{}, ErrInvalid
		}
		return Item{Kind: Integer, Int: v}, nil
	}
	if intDigits > 12 {
		return Item{}, ErrInvalid
	}
	p.pos++
	fracStart := p.pos
	for !p.eof() && isDigit(p.peek()) {
		p.pos++
	}
	if n := p.pos - fracStart; n < 1 || n > 3 {
		return Item{}, ErrInvalid
	}
	v, err := strconv.ParseFloat(p.s[start:p.pos], 64)
	if err != nil {
		return Item{}, ErrInvalid
	}
	return Item{Kind: Decimal, Float: v}, nil
}

func (p *parser) str() (string, error) {
	p.pos++ // opening quote
	var b strings.Builder
	for !p.eof() {
		c := p.peek()
		p.pos++
		switch {
		case c == '\\':
			if p.eof() || (p.peek() != '"' && p.peek() != '\\') {
				return "", ErrInvalid
			}
			b.WriteByte(p.peek())
			p.pos++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", ErrInvalid
		default:
			b.WriteByte(c)
		}
	}
	return "", ErrInvalid
}

func (p *parser) displayString() (string, error) {
	p.pos++ // opening quote
	var b []byte
	for !p.eof() {
		c := p.peek()
		p.pos++
		switch {
		case c == '%':
			if p.pos+2 > len(p.s) {
				return "", ErrInvalid
			}
			h := p.s[p.pos : p.pos+2]
			if strings.ToLower(h) != h {
				return "", ErrInvalid
			}
			v, err := strconv.ParseUint(h, 16, 8)
			if err != nil {
				return "", ErrInvalid
			}
			b = append(b, byte(v))
			p.pos += 2
		case c == '"':
			if !utf8.Valid(b) {
				return "", ErrInvalid
			}
			return string(b), nil
		case c < 0x20 || c > 0x7e:
			return "", ErrInvalid
		default:
			b = append(b, c)
		}
	}
	return "", ErrInvalid
}
