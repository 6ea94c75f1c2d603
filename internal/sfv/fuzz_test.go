package sfv

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

// FuzzParseList checks ParseList against github.com/dunglas/httpsfv, an
// independent RFC 9651 parser, as the oracle: for every field (one or two
// lines), ParseList never panics, refuses exactly what httpsfv refuses,
// and where both accept, the members agree: kinds, values, inner lists
// and parameters. A field httpsfv accepts also survives a round trip:
// httpsfv's serialization of it parses, with ParseList, to the same
// members.
//
// Deliberate differences, normalised before comparing:
//   - ParseList trims leading and trailing HTAB as well as SP (HTTP
//     removes that whitespace around a field value anyway, RFC 9110 §5.5);
//     RFC 9651 §4.2 discards SP only, and so does httpsfv. The oracle is
//     given the field with its leading OWS removed (trailing OWS after a
//     member is allowed by both).
//   - Member.Inner keeps an inner list's items without their parameters
//     (nothing ration reads carries them); they are parsed, and refused
//     when malformed, all the same, so only their values are compared.
//   - Member.Params keeps every parameter as written, Member.Param
//     answering the last of a repeated key (§4.2.3.2); httpsfv keeps one
//     per key, in first-seen order, with the last value. ParseList's are
//     compared through Param, in that order.
//
// Outside the oracle's reach: Dictionaries and bare Items as top-level
// types (ParseList reads Lists only).
func FuzzParseList(f *testing.F) {
	for _, s := range [][2]string{
		{`"default";r=0;t=30`, ""},
		{`"quota";q=100;w=60, "burst";q=10;w=1`, ""},
		{`"a\"b";q=10;w=2, tok/x;r=-3.5;f`, `(1 2);z=?0, :aGk=:`},
		{`("a" b;p=1 ?1);x, @1659578233, %"f%c3%bc%c3%bc"`, ""},
		{`-999999999999999, 999999999999.999, -0.5;k=*tok`, ""},
		{`  a , b  `, "\tc"},
		{"\ta", ""},
		{`a;b;b=2;c=3;b=?0`, ""},
		{`:YQ==:, :YWI=:, ::`, ""},
		{`%"%FF"`, ""},
		{`a,`, ""},
		{`1234567890123456`, ""},
		{`1234567890123.1`, ""},
		{`()`, ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, first, second string) {
		lines := []string{first}
		if second != "" {
			lines = append(lines, second)
		}
		got, err := ParseList(lines)
		field := strings.TrimLeft(strings.Join(lines, ", "), " \t")
		want, oerr := httpsfv.UnmarshalList([]string{field})
		switch {
		case err != nil && oerr != nil:
			return
		case err != nil:
			t.Fatalf("ParseList(%q): %v; httpsfv parses %#v", lines, err, want)
		case oerr != nil:
			t.Fatalf("ParseList(%q) = %s; httpsfv refuses it: %v", lines, describe(got), oerr)
		}
		if err := sameList(got, want); err != nil {
			t.Fatalf("ParseList(%q) = %s: %v", lines, describe(got), err)
		}
		canon, merr := httpsfv.Marshal(want)
		if merr != nil {
			return // e.g. a Decimal that rounds past 12 integer digits
		}
		again, err := ParseList([]string{canon})
		if err != nil {
			t.Fatalf("ParseList(%q), httpsfv's serialization of %q: %v", canon, lines, err)
		}
		if err := sameList(again, want); err != nil {
			t.Fatalf("ParseList(%q), httpsfv's serialization of %q: %v", canon, lines, err)
		}
	})
}

func describe(l []Member) string { return fmt.Sprintf("%+v", l) }

func sameList(got []Member, want httpsfv.List) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d members, httpsfv %d", len(got), len(want))
	}
	for i, m := range want {
		g := got[i]
		var params *httpsfv.Params
		switch m := m.(type) {
		case httpsfv.Item:
			if g.IsList {
				return fmt.Errorf("member %d: an inner list, httpsfv an item", i)
			}
			if err := sameItem(g.Item, m.Value); err != nil {
				return fmt.Errorf("member %d: %v", i, err)
			}
			params = m.Params
		case httpsfv.InnerList:
			if !g.IsList {
				return fmt.Errorf("member %d: an item, httpsfv an inner list", i)
			}
			if len(g.Inner) != len(m.Items) {
				return fmt.Errorf("member %d: %d inner items, httpsfv %d", i, len(g.Inner), len(m.Items))
			}
			for j, it := range m.Items {
				if err := sameItem(g.Inner[j], it.Value); err != nil {
					return fmt.Errorf("member %d, inner item %d: %v", i, j, err)
				}
			}
			params = m.Params
		default:
			return fmt.Errorf("member %d: httpsfv member of type %T", i, m)
		}
		if err := sameParams(g, params); err != nil {
			return fmt.Errorf("member %d: %v", i, err)
		}
	}
	return nil
}

func sameParams(g Member, want *httpsfv.Params) error {
	var names []string
	seen := map[string]bool{}
	for _, p := range g.Params {
		if !seen[p.Key] {
			seen[p.Key] = true
			names = append(names, p.Key)
		}
	}
	if fmt.Sprint(names) != fmt.Sprint(want.Names()) {
		return fmt.Errorf("parameters %q, httpsfv %q", names, want.Names())
	}
	for _, k := range names {
		v, _ := g.Param(k)
		w, _ := want.Get(k)
		if err := sameItem(v, w); err != nil {
			return fmt.Errorf("parameter %q: %v", k, err)
		}
	}
	return nil
}

func sameItem(g Item, want any) error {
	ok := false
	switch w := want.(type) {
	case int64:
		ok = g.Kind == Integer && g.Int == w
	case float64:
		ok = g.Kind == Decimal && g.Float == w
	case string:
		ok = g.Kind == String && g.Str == w
	case httpsfv.Token:
		ok = g.Kind == Token && g.Str == string(w)
	case []byte:
		ok = g.Kind == Bytes && bytes.Equal(g.Bytes, w)
	case bool:
		ok = g.Kind == Boolean && g.Bool == w
	case time.Time:
		ok = g.Kind == Date && g.Int == w.Unix()
	case httpsfv.DisplayString:
		ok = g.Kind == DisplayString && g.Str == string(w)
	default:
		return fmt.Errorf("httpsfv bare item of type %T", want)
	}
	if !ok {
		return fmt.Errorf("%+v, httpsfv %T %#v", g, want, want)
	}
	return nil
}
