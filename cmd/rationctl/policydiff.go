package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/policy"
)

// Policy changes as code: `policy diff` shows what `policy apply` would
// change, and `policy apply --prune` also deletes the stored policies the
// file does not name. Both are for CI pipelines: diff exits 0 when the
// cluster already matches the file, 1 when it does not, 2 on any error.

// exitCode, returned by a verb's run, is its exit status, with nothing
// printed (a diff that found changes).
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// readPolicyFile is what policy apply and policy diff read: -f FILE, or
// standard input for -f -, checked to be text.
func readPolicyFile(o *invocation) (err error) {
	name := fileName(o)
	if o.file == "-" {
		o.data, err = io.ReadAll(os.Stdin)
	} else {
		o.data, err = os.ReadFile(o.file)
	}
	if err != nil {
		return err
	}
	// The API carries the file as a string, which must be UTF-8: say so
	// here, naming the file, rather than as gRPC's marshaling error.
	return policy.CheckText(name, o.data)
}

// fileName names -f's file in errors.
func fileName(o *invocation) string {
	if o.file == "-" {
		return "standard input"
	}
	return o.file
}

func requireFile(o *invocation) error {
	if o.file == "" {
		return errors.New("-f FILE is required")
	}
	return nil
}

var policyDiffVerb = verb{
	name:     "policy diff",
	synopsis: "-f FILE",
	summary:  "show what applying a policy file would change",
	help: `Compares a policy file (docs/policy.md) with the stored policies and prints
what 'policy apply -f FILE' would change: policies added, policies changed
(each setting that differs, stored -> file, in the units of 'policy get
--json'), and stored policies the file does not name, which only
'policy apply --prune' deletes. The file is parsed here, as the cluster
would (defaults filled in), and nothing is sent to be stored.

Exit status: 0 if the cluster matches the file (nothing to add, change or
prune), 1 if it does not, 2 on any error (usage, a file that does not
parse, an unreachable cluster). --json prints {"in_sync", "added":
[{"name", "spec"}], "changed": [{"name", "fields": [{"field", "stored",
"file"}]}], "removed": [NAME], "unchanged": [NAME]}.`,
	reads: true,
	flags: func(fs *flag.FlagSet, o *invocation) {
		fs.StringVar(&o.file, "f", "", "policy `FILE` to compare; - reads standard input")
	},
	check:    requireFile,
	prepare:  readPolicyFile,
	failCode: 2,
	run: func(ctx context.Context, o *invocation) error {
		f, err := policy.Parse(strings.NewReader(string(o.data)))
		if err != nil {
			return fmt.Errorf("%s: %w", fileName(o), err)
		}
		stored, err := o.admin().ListPolicies(ctx, &api.ListPoliciesRequest{})
		if err != nil {
			return err
		}
		d := diffPolicies(f.Policies, stored.GetPolicies())
		if o.json {
			err = writeJSON(o.stdout, d)
		} else {
			err = writeDiff(o.stdout, d)
		}
		if err != nil {
			return err
		}
		if !d.InSync {
			return exitCode(1)
		}
		return nil
	},
}

// policyDiff is `policy diff --json`.
type policyDiff struct {
	InSync    bool            `json:"in_sync"`
	Added     []addedPolicy   `json:"added"`
	Changed   []changedPolicy `json:"changed"`
	Removed   []string        `json:"removed"`
	Unchanged []string        `json:"unchanged"`
}

type addedPolicy struct {
	Name string          `json:"name"`
	Spec *policySpecJSON `json:"spec"`
}

type changedPolicy struct {
	Name   string        `json:"name"`
	Fields []fieldChange `json:"fields"`
}

type fieldChange struct {
	Field  string `json:"field"`
	Stored any    `json:"stored"`
	File   any    `json:"file"`
}

// diffPolicies compares the file's policies with the stored ones, field by
// field over every setting (policy get --json's spec). A stored policy
// this rationctl cannot read differs in its "yaml".
func diffPolicies(file []policy.Policy, stored []*api.PolicyInfo) policyDiff {
	d := policyDiff{Added: []addedPolicy{}, Changed: []changedPolicy{}, Removed: []string{}, Unchanged: []string{}}
	have := map[string]*api.PolicyInfo{}
	for _, s := range stored {
		have[s.GetName()] = s
	}
	named := map[string]bool{}
	for _, p := range file {
		named[p.Name] = true
		want := specOf(p)
		s, ok := have[p.Name]
		if !ok {
			d.Added = append(d.Added, addedPolicy{Name: p.Name, Spec: want})
			continue
		}
		got := toPolicyJSON(s)
		if got.Spec == nil {
			d.Changed = append(d.Changed, changedPolicy{Name: p.Name, Fields: []fieldChange{{Field: "yaml", Stored: s.GetYaml(), File: "(" + got.Unreadable + ")"}}})
			continue
		}
		if fields := specChanges(got.Spec, want); len(fields) > 0 {
			d.Changed = append(d.Changed, changedPolicy{Name: p.Name, Fields: fields})
		} else {
			d.Unchanged = append(d.Unchanged, p.Name)
		}
	}
	for _, s := range stored {
		if !named[s.GetName()] {
			d.Removed = append(d.Removed, s.GetName())
		}
	}
	sort.Slice(d.Added, func(i, j int) bool { return d.Added[i].Name < d.Added[j].Name })
	sort.Slice(d.Changed, func(i, j int) bool { return d.Changed[i].Name < d.Changed[j].Name })
	sort.Strings(d.Removed)
	sort.Strings(d.Unchanged)
	d.InSync = len(d.Added) == 0 && len(d.Changed) == 0 && len(d.Removed) == 0
	return d
}

// specChanges lists the settings that differ, in declaration order, by
// their JSON names. An empty list and a missing one are the same.
func specChanges(stored, file *policySpecJSON) []fieldChange {
	var out []fieldChange
	a, b := reflect.ValueOf(*stored), reflect.ValueOf(*file)
	for i := range a.NumField() {
		x, y := a.Field(i).Interface(), b.Field(i).Interface()
		if reflect.DeepEqual(x, y) || (a.Field(i).Kind() == reflect.Slice || a.Field(i).Kind() == reflect.Map) && a.Field(i).Len() == 0 && b.Field(i).Len() == 0 {
			continue
		}
		name, _, _ := strings.Cut(a.Type().Field(i).Tag.Get("json"), ",")
		out = append(out, fieldChange{Field: name, Stored: x, File: y})
	}
	return out
}

func writeDiff(w io.Writer, d policyDiff) error {
	var b strings.Builder
	for _, a := range d.Added {
		fmt.Fprintf(&b, "+ %s (added)\n", a.Name)
	}
	for _, c := range d.Changed {
		fmt.Fprintf(&b, "~ %s (changed)\n", c.Name)
		for _, f := range c.Fields {
			fmt.Fprintf(&b, "    %s: %v -> %v\n", f.Field, fmtValue(f.Stored), fmtValue(f.File))
		}
	}
	for _, r := range d.Removed {
		fmt.Fprintf(&b, "- %s (not in the file: deleted by apply --prune only)\n", r)
	}
	if d.InSync {
		fmt.Fprintf(&b, "no changes: the cluster's %d policies match the file\n", len(d.Unchanged))
	} else {
		fmt.Fprintf(&b, "%d to add, %d to change, %d to prune, %d unchanged\n", len(d.Added), len(d.Changed), len(d.Removed), len(d.Unchanged))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtValue(v any) string {
	switch x := v.(type) {
	case string:
		if x == "" {
			return `""`
		}
		if strings.ContainsAny(x, " \n\t") {
			return fmt.Sprintf("%q", x)
		}
		return x
	case []string:
		return "[" + strings.Join(x, ", ") + "]"
	case map[string]int64:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s: %d", k, x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprint(v)
}

// prune deletes the stored policies that applied (the names in the file
// just applied) does not name, and prints each deletion.
func prune(ctx context.Context, o *invocation, applied []string) error {
	keep := map[string]bool{}
	for _, n := range applied {
		keep[n] = true
	}
	stored, err := o.admin().ListPolicies(ctx, &api.ListPoliciesRequest{})
	if err != nil {
		return fmt.Errorf("applied, but listing the policies to prune failed: %w", err)
	}
	var gone []string
	for _, p := range stored.GetPolicies() {
		if !keep[p.GetName()] {
			gone = append(gone, p.GetName())
		}
	}
	sort.Strings(gone)
	for _, name := range gone {
		r, err := o.admin().DeletePolicy(ctx, &api.DeletePolicyRequest{Name: name})
		if err != nil {
			return fmt.Errorf("pruning %s: %w", name, err)
		}
		if _, err := fmt.Fprintf(o.stdout, "deleted %s (log index %d)\n", name, r.GetIndex()); err != nil {
			return err
		}
	}
	if len(gone) == 0 {
		_, err = fmt.Fprintln(o.stdout, "pruned nothing: every stored policy is in the file")
	}
	return err
}
