package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotText: a file that is not UTF-8 text gets an error naming the file,
// the line and column of the first bad byte and what is wrong, from Parse,
// ParseFile and CheckText alike; valid UTF-8 (a BOM, non-ASCII names in
// comments) is not refused.
func TestNotText(t *testing.T) {
	valid := "policies:\n  - name: a\n    algorithm: token-bucket\n    rate: 1\n    burst: 1\n"
	for _, c := range []struct {
		name string
		data string
		want string // the error after "FILE: "
	}{
		{"invalid utf-8", "policies:\n  - name: a\xff\n", "line 2: column 12: byte 0xff is not valid UTF-8: the file is not UTF-8 text; want a YAML policy file in UTF-8"},
		{"truncated rune", "# caf\xc3", "line 1: column 6: byte 0xc3 is not valid UTF-8"},
		{"binary", "\x7fELF\x02\x01\x01\x00\x00", "line 1: column 8: a NUL byte: the file is binary, not text"},
		{"utf-16", "\xff\xfep\x00o\x00", "line 1: column 4: a NUL byte: the file is binary, not text"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.yaml")
			if err := os.WriteFile(path, []byte(c.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ParseFile(path)
			if err == nil || !strings.HasPrefix(err.Error(), path+": "+c.want) {
				t.Errorf("ParseFile: %v\nwant prefix %q", err, path+": "+c.want)
			}
			if !errors.Is(err, ErrInvalidPolicy) {
				t.Errorf("ParseFile: %v does not wrap ErrInvalidPolicy", err)
			}
			if _, err := Parse(strings.NewReader(c.data)); err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("Parse: %v\nwant prefix %q", err, c.want)
			}
			if err := CheckText("in.yaml", []byte(c.data)); err == nil || !strings.HasPrefix(err.Error(), "in.yaml: "+c.want) {
				t.Errorf("CheckText: %v", err)
			}
		})
	}
	for _, ok := range []string{valid, "\xef\xbb\xbf" + valid, "# café ☕\n" + valid} {
		if err := CheckText("ok.yaml", []byte(ok)); err != nil {
			t.Errorf("CheckText(%q): %v", ok, err)
		}
		if _, err := Parse(strings.NewReader(ok)); err != nil {
			t.Errorf("Parse(%q): %v", ok, err)
		}
	}
}
