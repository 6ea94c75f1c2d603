package sfv

import "testing"

func TestParseList(t *testing.T) {
	got, err := ParseList([]string{`"a\"b";q=10;w=2, tok/x;r=-3.5;f`, `(1 2);z=?0, :aGk=:`})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0].Item.Str != `a"b` || got[1].Item.Kind != Token || got[1].Item.Str != "tok/x" {
		t.Fatalf("%#v", got)
	}
	if v, _ := got[0].Param("q"); v.Kind != Integer || v.Int != 10 {
		t.Fatalf("q = %#v", v)
	}
	if v, _ := got[1].Param("r"); v.Kind != Decimal || v.Float != -3.5 {
		t.Fatalf("r = %#v", v)
	}
	if v, _ := got[1].Param("f"); v.Kind != Boolean || !v.Bool {
		t.Fatalf("f = %#v", v)
	}
	if !got[2].IsList || len(got[2].Inner) != 2 {
		t.Fatalf("inner list %#v", got[2])
	}
	if got[3].Item.Kind != Bytes || string(got[3].Item.Bytes) != "hi" {
		t.Fatalf("bytes %#v", got[3])
	}
	for _, bad := range []string{`"x`, `a,`, `"a";Q=1`, `1.2345`, `"a" "b"`, `?2`, `"\x"`, `@`, `0, @`, ":YQ\n==:"} {
		if _, err := ParseList([]string{bad}); err == nil {
			t.Errorf("%q parsed, want an error", bad)
		}
	}
}
