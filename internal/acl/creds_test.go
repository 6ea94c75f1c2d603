package acl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadToken: text or a file (trimmed), never both; a malformed token
// is refused without repeating it; neither is "".
func TestLoadToken(t *testing.T) {
	s, _ := NewSecret()
	dir := t.TempDir()
	file := filepath.Join(dir, "t")
	if err := os.WriteFile(file, []byte("  "+s.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("ration_my-secret-typo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token, file, want, err string
	}{
		{"", "", "", ""},
		{s.String(), "", s.String(), ""},
		{"", file, s.String(), ""},
		{s.String(), file, "", "not both"},
		{"", filepath.Join(dir, "none"), "", "token file"},
		{"", bad, "", "malformed token"},
	} {
		got, err := LoadToken(tc.token, tc.file)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("LoadToken(%q, %q) = %q, %v", tc.token, tc.file, got, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "my-secret-typo")) {
			t.Errorf("LoadToken(%q, %q): %v, want an error saying %q", tc.token, tc.file, err, tc.err)
		}
	}
}
