// Package envoyconf reads envoyproxy/ratelimit's YAML configuration as it
// is (one domain per file, nested descriptors) and answers, for a request
// descriptor, the rule that applies to it, with the same matching order
// as envoyproxy/ratelimit: at each level of the descriptor the entry's
// key and value are tried first, then the value patterns with '*' (in file
// order), then the key alone; a rule applies only to a descriptor with
// exactly as many entries as the rule is deep. Each rule maps to a ration
// token-bucket policy (Policies) and each request descriptor to a key of
// it (Rule.Key).
//
// See docs/envoy.md for the mapping and what differs from
// envoyproxy/ratelimit.
package envoyconf

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/policy"
)

// Unit is a rate_limit unit, numbered as in envoy.service.ratelimit.v3
// RateLimitResponse.RateLimit.Unit.
type Unit int32

// The units envoyproxy/ratelimit accepts (go-control-plane v1.40.0 defines
// WEEK as 7).
const (
	UnitSecond Unit = 1
	UnitMinute Unit = 2
	UnitHour   Unit = 3
	UnitDay    Unit = 4
	UnitMonth  Unit = 5
	UnitYear   Unit = 6
	UnitWeek   Unit = 7
)

var unitNames = map[string]Unit{"second": UnitSecond, "minute": UnitMinute, "hour": UnitHour, "day": UnitDay,
	"week": UnitWeek, "month": UnitMonth, "year": UnitYear}

// Seconds is the unit's length as envoyproxy/ratelimit counts it (a month
// is 30 days, a year 365).
func (u Unit) Seconds() int64 {
	switch u {
	case UnitSecond:
		return 1
	case UnitMinute:
		return 60
	case UnitHour:
		return 3600
	case UnitDay:
		return 86400
	case UnitWeek:
		return 7 * 86400
	case UnitMonth:
		return 30 * 86400
	case UnitYear:
		return 365 * 86400
	}
	return 0
}

func (u Unit) String() string {
	for n, v := range unitNames {
		if v == u {
			return n
		}
	}
	return "unit(" + strconv.Itoa(int(u)) + ")"
}

// Entry is one level of a rule's descriptor path: a key and, optionally, a
// value (which may hold '*' wildcards).
type Entry struct {
	Key, Value string
}

// Rule is a descriptor that carries a rate_limit.
type Rule struct {
	File   string
	Line   int // the line of the descriptor's key
	Domain string
	Path   []Entry
	// FullKey names the rule as envoyproxy/ratelimit's stats do:
	// domain.key_value.key...
	FullKey string

	RequestsPerUnit uint32
	Unit            Unit
	Unlimited       bool
	Name            string
	Replaces        []string
	ShadowMode      bool
	DetailedMetric  bool
	// ShareThreshold is set per level: the values matching that level's
	// wildcard share one budget.
	ShareThreshold []bool

	// Policy is the ration policy the rule maps to ("" for an unlimited
	// rule and one of requests_per_unit 0, which the edge answers itself).
	Policy string
	// Attrs names the key attribute each level's value is passed as.
	Attrs []string
	// KeyAttrs are the policy's key attributes: Attrs without the levels
	// whose wildcard shares a threshold.
	KeyAttrs []string
}

// DenyAll reports whether the rule refuses everything (requests_per_unit
// 0, as envoyproxy/ratelimit's README uses for a blocked address).
func (r *Rule) DenyAll() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Label names the rule in errors and logs: file:line and its full key.
func (r *Rule) Label() string { return fmt.Sprintf("%s:%d (%s)", r.File, r.Line, r.FullKey) }

// Key is the ration key of a request descriptor that matched r: each
// level's value under its attribute (values has one per level of
// r.Path), leaving out the levels whose wildcard shares a threshold.
func (r *Rule) Key(values []string) client.Key {
	k := make(client.Key, len(values))
	for i, v := range values {
		if r.ShareThreshold[i] {
			continue
		}
		k[r.Attrs[i]] = v
	}
	return k
}

// RatePerSecond is the rule's rate in tokens per second.
func (r *Rule) RatePerSecond() float64 {
	if r.Unit.Seconds() == 0 {
		return 0
	}
	return float64(r.RequestsPerUnit) / float64(r.Unit.Seconds())
}

type node struct {
	children  map[string]*node // by "key" or "key_value"
	wildcards []wildcard       // patterns, in file order
	rule      *Rule
	// shareThreshold: the values matching this level's wildcard share
	// one budget.
	shareThreshold bool
}

type wildcard struct {
	key   string // "key_value*..."
	parts []string
}

// Config is a loaded set of files.
type Config struct {
	domains map[string]*node
	// Rules lists every rule, in file order.
	Rules []*Rule
	files map[string]string // domain -> file
}

// Error is one problem in a configuration file.
type Error struct {
	File string
	Line int
	Rule string // the descriptor's full key so far, or ""
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ": line %d", e.Line)
	}
	if e.Rule != "" {
		fmt.Fprintf(&b, ": descriptor %q", e.Rule)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

// LoadFiles reads and merges the files (one domain each). Every problem
// found is reported, each naming its file, line and descriptor.
func LoadFiles(paths ...string) (*Config, error) {
	c := newConfig()
	var errs []error
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, c.load(p, data)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

// Load is LoadFiles for contents in memory, by file name.
func Load(files map[string][]byte) (*Config, error) {
	c := newConfig()
	var errs []error
	for _, name := range sortedKeys(files) {
		errs = append(errs, c.load(name, files[name])...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if err := c.finish(); err != nil {
		return nil, err
	}
	return c, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func newConfig() *Config {
	return &Config{domains: map[string]*node{}, files: map[string]string{}}
}

// Domains lists the configured domains, sorted.
func (c *Config) Domains() []string { return sortedKeys(c.domains) }

// Fields envoyproxy/ratelimit knows; the ones ration does not act on are
// accepted and ignored (value_to_metric, metadata: metrics and dynamic
// metadata only) or refused (quota_mode).
var descriptorFields = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode",
	"detailed_metric", "value_to_metric", "share_threshold", "metadata"}
var rateLimitFields = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces"}

type loader struct {
	file string
	errs []error
}

func (l *loader) errf(n *yaml.Node, rule, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	l.errs = append(l.errs, &Error{File: l.file, Line: line, Rule: rule, Msg: fmt.Sprintf(format, args...)})
}

func (c *Config) load(file string, data []byte) []error {
	l := &loader{file: file}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return []error{&Error{File: file, Msg: "not valid YAML: " + err.Error()}}
	}
	// A document start ("---") alone is a document of nothing, which
	// yaml.v3 places on the line past it.
	if len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" && doc.Content[0].Value == "" {
		return []error{&Error{File: file, Msg: "empty file; want a mapping with domain and descriptors"}}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		l.errf(root, "", "the top level must be a mapping with domain and descriptors")
		return l.errs
	}
	var domain string
	var domainNode, descs *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "domain":
			domainNode = v
			if v.Kind != yaml.ScalarNode {
				l.errf(v, "", "domain must be a string")
			} else {
				domain = v.Value
			}
		case "descriptors":
			descs = v
		default:
			l.errf(k, "", "unknown field %q at the top level; want domain, descriptors", k.Value)
		}
	}
	if domain == "" {
		l.errf(cmp.Or(domainNode, root), "", "config file cannot have an empty domain")
		return l.errs
	}
	if prev, ok := c.files[domain]; ok {
		l.errf(domainNode, "", "duplicate domain %q (also in %s)", domain, prev)
		return l.errs
	}
	c.files[domain] = file
	top := &node{children: map[string]*node{}}
	c.domains[domain] = top
	if descs != nil {
		c.loadDescriptors(l, top, domain, nil, descs)
	}
	return l.errs
}

func (c *Config) loadDescriptors(l *loader, parent *node, domain string, path []Entry, list *yaml.Node) {
	prefix := fullKey(domain, path)
	if list.Kind != yaml.SequenceNode {
		if list.Tag == "!!null" {
			return
		}
		l.errf(list, prefix, "descriptors must be a list of mappings")
		return
	}
	for _, d := range list.Content {
		if d.Kind != yaml.MappingNode {
			l.errf(d, prefix, "descriptors must be a list of mappings; found %s", kindName(d))
			continue
		}
		var e Entry
		var keyNode, rl, sub *yaml.Node
		var shadow, detailed, share bool
		for i := 0; i+1 < len(d.Content); i += 2 {
			k, v := d.Content[i], d.Content[i+1]
			switch k.Value {
			case "key":
				keyNode = v
				e.Key = scalar(l, v, prefix, "key")
			case "value":
				e.Value = scalar(l, v, prefix, "value")
			case "rate_limit":
				rl = v
			case "descriptors":
				sub = v
			case "shadow_mode":
				shadow = boolean(l, v, prefix, "shadow_mode")
			case "detailed_metric":
				detailed = boolean(l, v, prefix, "detailed_metric")
			case "share_threshold":
				share = boolean(l, v, prefix, "share_threshold")
			case "quota_mode":
				if boolean(l, v, prefix, "quota_mode") {
					l.errf(k, prefix, "quota_mode is not supported by rationd edge (quotas are leased token buckets; see docs/envoy.md)")
				}
			case "value_to_metric", "metadata":
				// Metrics and dynamic metadata only: accepted, ignored.
			default:
				l.errf(k, prefix, "unknown field %q%s; descriptor fields are %s", k.Value, suggest(k.Value, descriptorFields), strings.Join(descriptorFields, ", "))
			}
		}
		if e.Key == "" {
			l.errf(cmp.Or(keyNode, d), prefix, "descriptor has an empty key")
			continue
		}
		final := e.Key
		if e.Value != "" {
			final += "_" + e.Value
		}
		p := append(slices.Clip(path), e)
		name := fullKey(domain, p)
		if _, dup := parent.children[final]; dup {
			l.errf(keyNode, name, "duplicate descriptor composite key %q", name)
			continue
		}
		if share && !strings.Contains(e.Value, "*") {
			l.errf(keyNode, name, "share_threshold can only be used with a wildcard value (containing '*')")
		}
		n := &node{children: map[string]*node{}}
		if strings.Contains(final, "*") {
			parent.wildcards = append(parent.wildcards, wildcard{key: final, parts: strings.Split(final, "*")})
		}
		parent.children[final] = n
		if rl != nil {
			r := c.loadRule(l, rl, name, keyNode.Line)
			if r != nil {
				r.Domain, r.Path, r.ShadowMode, r.DetailedMetric = domain, p, shadow, detailed
				n.rule = r
				c.Rules = append(c.Rules, r)
			}
		}
		n.shareThreshold = share
		if sub != nil {
			c.loadDescriptors(l, n, domain, p, sub)
		}
	}
}

func (c *Config) loadRule(l *loader, rl *yaml.Node, name string, line int) *Rule {
	if rl.Kind != yaml.MappingNode {
		l.errf(rl, name, "rate_limit must be a mapping of unit, requests_per_unit, unlimited, name, replaces")
		return nil
	}
	r := &Rule{File: l.file, Line: line, FullKey: name}
	var unitNode *yaml.Node
	var unit string
	ok := true
	for i := 0; i+1 < len(rl.Content); i += 2 {
		k, v := rl.Content[i], rl.Content[i+1]
		switch k.Value {
		case "unit":
			unitNode = v
			unit = scalar(l, v, name, "rate_limit.unit")
		case "requests_per_unit":
			n, err := strconv.ParseUint(v.Value, 10, 32)
			if v.Kind != yaml.ScalarNode || err != nil {
				l.errf(v, name, "rate_limit.requests_per_unit: %q is not a whole number from 0 to 4294967295", v.Value)
				ok = false
			}
			r.RequestsPerUnit = uint32(n)
		case "unlimited":
			r.Unlimited = boolean(l, v, name, "rate_limit.unlimited")
		case "name":
			r.Name = scalar(l, v, name, "rate_limit.name")
		case "replaces":
			if v.Kind != yaml.SequenceNode {
				l.errf(v, name, "rate_limit.replaces must be a list of {name: ...}")
				ok = false
				continue
			}
			for _, e := range v.Content {
				var rn string
				if e.Kind == yaml.MappingNode {
					for j := 0; j+1 < len(e.Content); j += 2 {
						if e.Content[j].Value == "name" {
							rn = e.Content[j+1].Value
						} else {
							l.errf(e.Content[j], name, "unknown field %q in rate_limit.replaces; want name", e.Content[j].Value)
						}
					}
				} else {
					l.errf(e, name, "rate_limit.replaces must be a list of {name: ...}")
					ok = false
					continue
				}
				if rn == "" {
					l.errf(e, name, "should not have an empty replaces entry")
					ok = false
				}
				r.Replaces = append(r.Replaces, rn)
			}
		default:
			l.errf(k, name, "unknown field %q in rate_limit%s; rate_limit fields are %s", k.Value, suggest(k.Value, rateLimitFields), strings.Join(rateLimitFields, ", "))
			ok = false
		}
	}
	u, valid := unitNames[strings.ToLower(unit)]
	switch {
	case r.Unlimited && valid:
		l.errf(unitNode, name, "should not specify rate limit unit when unlimited")
		ok = false
	case !r.Unlimited && !valid:
		l.errf(cmp.Or(unitNode, rl), name, "invalid rate limit unit %q; want second, minute, hour, day, week, month or year", unit)
		ok = false
	}
	r.Unit = u
	for _, rn := range r.Replaces {
		if rn != "" && rn == r.Name {
			l.errf(rl, name, "replaces should not contain the name of the same descriptor (%q)", rn)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	return r
}

func scalar(l *loader, v *yaml.Node, rule, field string) string {
	if v.Kind != yaml.ScalarNode {
		l.errf(v, rule, "%s must be a string", field)
		return ""
	}
	return v.Value
}

func boolean(l *loader, v *yaml.Node, rule, field string) bool {
	b, err := strconv.ParseBool(v.Value)
	if v.Kind != yaml.ScalarNode || err != nil {
		l.errf(v, rule, "%s: %q is not true or false", field, v.Value)
	}
	return b
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.ScalarNode:
		return fmt.Sprintf("a scalar %q", n.Value)
	case yaml.SequenceNode:
		return "a list"
	}
	return "something else"
}

func suggest(got string, fields []string) string {
	best, bestD := "", 3
	for _, f := range fields {
		if d := editDistance(got, f); d < bestD {
			best, bestD = f, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev = cur
	}
	return prev[len(b)]
}

func fullKey(domain string, path []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range path {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// finish names each rule's policy and attributes and checks the policies.
func (c *Config) finish() error {
	var errs []error
	byName := map[string]*Rule{}
	for _, r := range c.Rules {
		r.ShareThreshold = make([]bool, len(r.Path))
		n := c.domains[r.Domain]
		for i, e := range r.Path {
			final := e.Key
			if e.Value != "" {
				final += "_" + e.Value
			}
			n = n.children[final]
			r.ShareThreshold[i] = n.shareThreshold
		}
		seen := map[string]bool{}
		for i, e := range r.Path {
			a := e.Key
			if seen[a] || a == policy.AttrAtMs || a == policy.AttrCost {
				a = e.Key + "#" + strconv.Itoa(i+1)
			}
			seen[a] = true
			r.Attrs = append(r.Attrs, a)
			if !r.ShareThreshold[i] {
				r.KeyAttrs = append(r.KeyAttrs, a)
			}
		}
		if r.Unlimited || r.DenyAll() {
			continue
		}
		r.Policy = policyName(r.FullKey)
		if o, dup := byName[r.Policy]; dup {
			errs = append(errs, &Error{File: r.File, Line: r.Line, Rule: r.FullKey, Msg: fmt.Sprintf("maps to policy %q, as %s does", r.Policy, o.Label())})
			continue
		}
		byName[r.Policy] = r
		if _, err := r.policyText(); err != nil {
			errs = append(errs, &Error{File: r.File, Line: r.Line, Rule: r.FullKey, Msg: err.Error()})
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if _, err := c.Policies(); err != nil {
		return err
	}
	return nil
}

// policyName derives a valid ration policy name (^[a-z0-9][a-z0-9_.-]{0,62}$)
// from a rule's full key: the key itself when it is one, else the key with
// every other character turned to '-', cut to fit, and a hash of the exact
// key appended, so that distinct rules never share a name.
func policyName(full string) string {
	var b strings.Builder
	lossy := false
	for i := 0; i < len(full); i++ {
		ch := full[i]
		switch {
		case ch >= 'a' && ch <= 'z', ch >= '0' && ch <= '9':
			b.WriteByte(ch)
		case ch == '_' || ch == '.' || ch == '-':
			if i == 0 {
				b.WriteByte('x')
				lossy = true
			}
			b.WriteByte(ch)
		case ch >= 'A' && ch <= 'Z':
			b.WriteByte(ch - 'A' + 'a')
			lossy = true
		default:
			b.WriteByte('-')
			lossy = true
		}
	}
	s := b.String()
	if !lossy && len(s) <= policy.MaxNameLen {
		return s
	}
	sum := sha256.Sum256([]byte(full))
	h := hex.EncodeToString(sum[:4])
	if len(s) > policy.MaxNameLen-9 {
		s = s[:policy.MaxNameLen-9]
	}
	return s + "-" + h
}

// rateText is the rule's rate as a policy file writes it. Units up to a
// day are exact (rpu/s, rpu/m, rpu/h, rpu/d); a week, month or year is
// longer than the longest rate interval (a day), so it becomes a rate per
// day rounded down to a thousandth of a token (never more than the rule
// allows).
func (r *Rule) rateText() (string, error) {
	switch r.Unit {
	case UnitSecond:
		return strconv.FormatUint(uint64(r.RequestsPerUnit), 10), nil
	case UnitMinute:
		return fmt.Sprintf("%d/m", r.RequestsPerUnit), nil
	case UnitHour:
		return fmt.Sprintf("%d/h", r.RequestsPerUnit), nil
	case UnitDay:
		return fmt.Sprintf("%d/d", r.RequestsPerUnit), nil
	}
	days := r.Unit.Seconds() / 86400
	milli := int64(r.RequestsPerUnit) * 1000 / days
	if milli == 0 {
		return "", fmt.Errorf("requests_per_unit %d per %s is less than 0.001 per day, the smallest rate ration leases", r.RequestsPerUnit, r.Unit)
	}
	return policy.FormatUnits(milli) + "/d", nil
}

// policyText is the rule's policy as a policy file entry.
func (r *Rule) policyText() (string, error) {
	rate, err := r.rateText()
	if err != nil {
		return "", err
	}
	if int64(r.RequestsPerUnit) > policy.MaxBurst {
		return "", fmt.Errorf("requests_per_unit %d is more than the largest burst %d", r.RequestsPerUnit, policy.MaxBurst)
	}
	// Up to a day the rate is rpu per unit, and a policy's rate is at
	// most MaxRate per interval; beyond, it is a day's share, always less.
	if r.Unit.Seconds() <= 86400 && int64(r.RequestsPerUnit) > policy.MaxRate {
		return "", fmt.Errorf("requests_per_unit %d per %s is more than the largest rate %d per %s", r.RequestsPerUnit, r.Unit, policy.MaxRate, r.Unit)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  # %s: %s line %d\n", r.FullKey, r.File, r.Line)
	fmt.Fprintf(&b, "  - name: %s\n    algorithm: token-bucket\n    rate: %s\n    burst: %d\n    charge: cost\n", r.Policy, rate, r.RequestsPerUnit)
	b.WriteString("    key: [")
	for i, a := range r.KeyAttrs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(a))
	}
	b.WriteString("]\n")
	if r.ShadowMode {
		b.WriteString("    shadow: true\n")
	}
	return b.String(), nil
}

// PolicyYAML is the policy file (docs/policy.md) of every rule that needs
// a policy, in rule order, each preceded by a comment naming its rule.
func (c *Config) PolicyYAML() string {
	var b strings.Builder
	b.WriteString("# ration policies for rationd edge, from envoyproxy/ratelimit configuration\n")
	b.WriteString("# (token buckets: rate = requests_per_unit per unit, burst = requests_per_unit; docs/envoy.md)\n")
	b.WriteString("policies:\n")
	n := 0
	for _, r := range c.Rules {
		switch {
		case r.Unlimited:
			fmt.Fprintf(&b, "  # %s: %s line %d: unlimited, answered OK by the edge (no policy)\n", r.FullKey, r.File, r.Line)
			continue
		case r.Policy == "":
			fmt.Fprintf(&b, "  # %s: %s line %d: requests_per_unit 0, refused by the edge (no policy)\n", r.FullKey, r.File, r.Line)
			continue
		}
		t, _ := r.policyText() // checked by finish
		b.WriteString(t)
		n++
	}
	if n == 0 {
		return ""
	}
	return b.String()
}

// Policies parses PolicyYAML: the validated policies (nil if no rule needs
// one).
func (c *Config) Policies() (*policy.File, error) {
	y := c.PolicyYAML()
	if y == "" {
		return &policy.File{}, nil
	}
	f, err := policy.Parse(strings.NewReader(y))
	if err != nil {
		return nil, fmt.Errorf("envoyconf: the derived policies do not validate (a bug): %w", err)
	}
	return f, nil
}

// Match returns the rule for a descriptor of domain with the given entry
// keys and values, or nil when no rule applies (an unknown domain, or no
// rule as deep as the descriptor along its path).
func (c *Config) Match(domain string, keys, values []string) *Rule {
	n := c.domains[domain]
	if n == nil {
		return nil
	}
	for i := range keys {
		final := keys[i] + "_" + values[i]
		next := n.children[final]
		if next == nil {
			for _, w := range n.wildcards {
				if wildcardMatch(w.parts, final) {
					next = n.children[w.key]
					break
				}
			}
		}
		if next == nil {
			next = n.children[keys[i]]
		}
		if next == nil {
			return nil
		}
		if i == len(keys)-1 {
			return next.rule
		}
		if len(next.children) == 0 {
			return nil
		}
		n = next
	}
	return nil
}

// wildcardMatch reports whether s matches the pattern split at its '*'s:
// each '*' stands for any run of characters, possibly empty.
func wildcardMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	mid := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(mid, p)
		if i < 0 {
			return false
		}
		mid = mid[i+len(p):]
	}
	return true
}

// Domain reports whether domain is configured.
func (c *Config) Domain(domain string) bool { return c.domains[domain] != nil }
