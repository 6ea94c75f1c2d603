package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCLIReference: docs/cli.md is what writeReference writes from the
// command table (-update rewrites it), and every command line's help in
// it is what "rationctl <words> -h" prints.
func TestCLIReference(t *testing.T) {
	var b bytes.Buffer
	writeReference(&b)
	path := filepath.Join("..", "..", "docs", "cli.md")
	if *update {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Errorf("docs/cli.md differs from the command table; run go test ./cmd/rationctl -run TestCLIReference -update")
	}
	for _, in := range invocables() {
		var out, errb bytes.Buffer
		if code := run(append(strings.Fields(in.words), "-h"), &out, &errb); code != 0 {
			t.Errorf("rationctl %s -h: exit %d: %s", in.words, code, errb.String())
			continue
		}
		if !strings.Contains(string(got), "### rationctl "+in.words+"\n\n```\n"+out.String()+"```\n") {
			t.Errorf("docs/cli.md lacks rationctl %s -h as it prints:\n%s", in.words, out.String())
		}
	}
}

// TestBashCompletion sources "rationctl completion bash" in bash and
// completes command lines as a user's Tab would.
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "rationctl.bash")
	var out, errb bytes.Buffer
	if code := run([]string{"completion", "bash"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var o2, e2 bytes.Buffer
	if code := run([]string{"completion", "fish"}, &o2, &e2); code != 2 || !strings.Contains(e2.String(), `want bash or zsh, got "fish"`) {
		t.Errorf("completion fish: exit %d, %q", code, e2.String())
	}
	if err := os.WriteFile(script, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policies.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(line string) []string {
		t.Helper()
		// The word under the cursor is the last one; a trailing space
		// starts a new, empty word.
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		var quoted []string
		for _, w := range words {
			quoted = append(quoted, "'"+w+"'")
		}
		prog := "source " + script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(words)-1) + "\n_rationctl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
		cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
		cmd.Dir = dir
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", line, err, b)
		}
		return strings.Fields(string(b))
	}
	for _, c := range []struct {
		line string
		want []string
	}{
		{"rationctl pol", []string{"policy"}},
		{"rationctl policy a", []string{"apply"}},
		{"rationctl acl token c", []string{"create"}},
		{"rationctl tls c", []string{"ca", "cert"}},
		{"rationctl --servers 127.0.0.1:7400 policy ap", []string{"apply"}},
		{"rationctl --json le", []string{"leases", "lease", "leader"}},
		{"rationctl policy apply --pr", []string{"--prune"}},
		{"rationctl policy apply -f pol", []string{"policies.yaml"}},
		{"rationctl simulate --tr", []string{"--trace"}},
		{"rationctl help sn", []string{"snapshot"}},
		{"rationctl completion ", []string{"bash", "zsh"}},
		{"rationctl --ser", []string{"--servers"}},
	} {
		if got := complete(c.line); strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%q completes to %q, want %q", c.line, got, c.want)
		}
	}
	// Every command line of the table completes word by word.
	for _, in := range invocables() {
		w := strings.Fields(in.words)
		for i := range w {
			line := "rationctl " + strings.Join(w[:i], " ") + " " + w[i]
			if got := complete(strings.Join(strings.Fields(line), " ")); !contains(got, w[i]) {
				t.Errorf("%q completes to %q, want %q among them", line, got, w[i])
			}
		}
	}
}
