package httplimit_test

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A small RFC 9651 (Structured Field Values) parser for the tests: Lists
// of Items and Inner Lists with Parameters, and every bare item type but
// Dates and Display Strings. It follows the parsing algorithms of §4.2.

type sfToken string

type sfParam struct {
	Key   string
	Value any // int64, float64, string, sfToken, []byte, bool
}

type sfMember struct {
	Value  any // a bare item, or []sfMember for an inner list
	Params []sfParam
}

func (m sfMember) param(key string) (any, bool) {
	for _, p := range m.Params {
		if p.Key == key {
			return p.Value, true
		}
	}
	return nil, false
}

type sfParser struct {
	s string
	i int
}

func parseSFList(s string) ([]sfMember, error) {
	p := &sfParser{s: s}
	p.skipSP()
	var out []sfMember
	for p.i < len(p.s) {
		m, err := p.member()
		if err != nil {
			return nil, err
		}
		out = append(out, m)
		p.skipOWS()
		if p.i == len(p.s) {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, fmt.Errorf("at %d: want ',' between list members", p.i)
		}
		p.i++
		p.skipOWS()
		if p.i == len(p.s) {
			return nil, fmt.Errorf("trailing comma")
		}
	}
	return out, nil
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

func (p *sfParser) member() (sfMember, error) {
	var m sfMember
	if p.i < len(p.s) && p.s[p.i] == '(' {
		p.i++
		var inner []sfMember
		for {
			p.skipSP()
			if p.i >= len(p.s) {
				return m, fmt.Errorf("unterminated inner list")
			}
			if p.s[p.i] == ')' {
				p.i++
				break
			}
			v, err := p.bareItem()
			if err != nil {
				return m, err
			}
			ps, err := p.params()
			if err != nil {
				return m, err
			}
			inner = append(inner, sfMember{Value: v, Params: ps})
			if p.i < len(p.s) && p.s[p.i] != ' ' && p.s[p.i] != ')' {
				return m, fmt.Errorf("at %d: bad inner list", p.i)
			}
		}
		m.Value = inner
	} else {
		v, err := p.bareItem()
		if err != nil {
			return m, err
		}
		m.Value = v
	}
	ps, err := p.params()
	m.Params = ps
	return m, err
}

func (p *sfParser) params() ([]sfParam, error) {
	var out []sfParam
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		replaced := false
		for j := range out {
			if out[j].Key == k {
				out[j].Value, replaced = v, true
			}
		}
		if !replaced {
			out = append(out, sfParam{Key: k, Value: v})
		}
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
	if p.i >= len(p.s) || !(isLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", fmt.Errorf("at %d: bad key start", p.i)
	}
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(isLCAlpha(c) || isDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bareItem() (any, error) {
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("missing item")
	}
	c := p.s[p.i]
	switch {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		start := p.i
		p.i++
		for p.i < len(p.s) && (isTChar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
			p.i++
		}
		return sfToken(p.s[start:p.i]), nil
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, fmt.Errorf("unterminated byte sequence")
		}
		b, err := base64.StdEncoding.DecodeString(p.s[p.i+1 : p.i+1+end])
		p.i += end + 2
		return b, err
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return p.s[p.i-1] == '1', nil
		}
		return nil, fmt.Errorf("bad boolean")
	}
	return nil, fmt.Errorf("at %d: unexpected %q", p.i, c)
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.s) || !isDigit(p.s[p.i]) {
		return nil, fmt.Errorf("bad number")
	}
	dot := -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if isDigit(c) {
			p.i++
		} else if c == '.' && dot < 0 {
			dot = p.i
			p.i++
		} else {
			break
		}
	}
	num := p.s[start:p.i]
	digits := strings.TrimPrefix(num, "-")
	if dot < 0 {
		if len(digits) > 15 {
			return nil, fmt.Errorf("integer %q too long", num)
		}
		return strconv.ParseInt(num, 10, 64)
	}
	intPart, frac, _ := strings.Cut(digits, ".")
	if len(intPart) > 12 || len(frac) == 0 || len(frac) > 3 {
		return nil, fmt.Errorf("bad decimal %q", num)
	}
	return strconv.ParseFloat(num, 64)
}

func (p *sfParser) str() (string, error) {
	p.i++
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return "", fmt.Errorf("bad escape")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("bad string character %q", c)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("unterminated string")
}

func TestSFParser(t *testing.T) {
	got, err := parseSFList(`"a\"b";q=10;w=2, tok/x;r=-3.5;f, (1 2);z=?0, :aGk=:`)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].Value != `a"b` || got[1].Value != sfToken("tok/x") {
		t.Fatalf("%#v", got)
	}
	if v, _ := got[0].param("q"); v != int64(10) {
		t.Fatalf("q = %#v", v)
	}
	if v, _ := got[1].param("r"); v != -3.5 {
		t.Fatalf("r = %#v", v)
	}
	if v, _ := got[1].param("f"); v != true {
		t.Fatalf("f = %#v", v)
	}
	if inner, ok := got[2].Value.([]sfMember); !ok || len(inner) != 2 {
		t.Fatalf("inner list %#v", got[2].Value)
	}
	if string(got[3].Value.([]byte)) != "hi" {
		t.Fatalf("bytes %#v", got[3].Value)
	}
	for _, bad := range []string{`"x`, `a,`, `"a";Q=1`, `1.2345`, `"a" "b"`, `?2`, `"\x"`} {
		if _, err := parseSFList(bad); err == nil {
			t.Errorf("%q parsed, want an error", bad)
		}
	}
}
