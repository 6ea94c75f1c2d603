package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ration-dev/ration/lease"
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// Parse reads and validates a policy file. On failure it returns every
// problem found, joined with errors.Join; each is an *Error wrapping
// ErrInvalidPolicy (see Errors).
func Parse(r io.Reader) (*File, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading the policy file: %w", err)
	}
	f, errs := parse(data)
	if len(errs) > 0 {
		return nil, joinErrors(errs)
	}
	return f, nil
}

// ParseFile is Parse on the named file; every *Error carries the path.
func ParseFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(fh)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	f, errs := parse(data)
	if len(errs) > 0 {
		for _, e := range errs {
			e.File = path
		}
		return nil, joinErrors(errs)
	}
	return f, nil
}

// parser accumulates problems while walking the document.
type parser struct {
	errs []*Error
	// unknown holds the unknown-field errors, reported after the others
	// (before the sort by line), in document order.
	unknown []unknownKey
	// lines maps each field of the policy being walked, by its dotted
	// name, to its line: where Validate's problems with it are reported.
	lines map[string]int
}

type unknownKey struct {
	key *yaml.Node
	err *Error
}

func (p *parser) add(e *Error) { p.errs = append(p.errs, e) }

func parse(data []byte) (*File, []*Error) {
	p := &parser{}
	if e := checkText(data); e != nil {
		return nil, []*Error{e}
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, []*Error{{Msg: "the file is empty; want a top-level policies: field with a list of policies"}}
		}
		return nil, []*Error{yamlSyntaxError(err)}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, []*Error{yamlSyntaxError(err)}
	default:
		return nil, []*Error{{Line: extra.Line, Msg: "the file has more than one YAML document (a second --- line); want exactly one"}}
	}

	f := p.walkFile(&doc)

	slices.SortStableFunc(p.unknown, func(a, b unknownKey) int {
		return cmp.Or(cmp.Compare(a.key.Line, b.key.Line), cmp.Compare(a.key.Column, b.key.Column))
	})
	for _, u := range p.unknown {
		p.add(u.err)
	}
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return f, nil
}

// yamlSyntaxError reports a syntax error from yaml.v3, whose errors carry
// their line only in their text: "yaml: line 3: did not find expected key".
// TestSyntaxErrorLine notices if that form changes.
func yamlSyntaxError(err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, text, ok := strings.Cut(rest, ": "); ok && n != "" && strings.Trim(n, "0123456789") == "" {
			if line, err := strconv.Atoi(n); err == nil {
				return &Error{Line: line, Msg: "invalid YAML: " + text}
			}
		}
	}
	return &Error{Msg: "invalid YAML: " + msg}
}

// unknownFields reports the keys of a mapping that are not in names, in
// the form report gives.
func (p *parser) unknownFields(fields []keyVal, names []string, report func(line int, name string) *Error) {
	for _, kv := range fields {
		if !slices.Contains(names, kv.key.Value) {
			p.unknown = append(p.unknown, unknownKey{kv.key, report(kv.key.Line, kv.key.Value)})
		}
	}
}

func unknownPolicyField(owner *Error, line int, name string) *Error {
	msg := "is not a policy field; want one of " + strings.Join(policyFieldNames, ", ")
	if s := suggest(name, policyFieldNames); s != "" {
		msg = fmt.Sprintf("is not a policy field; did you mean %q? Fields are %s", s, strings.Join(policyFieldNames, ", "))
	}
	return &Error{Line: line, PolicyName: owner.PolicyName, PolicyIndex: owner.PolicyIndex, Field: name, Msg: msg}
}

// unknownSectionField reports an unknown field of a lease or weights
// mapping, by its dotted name.
func unknownSectionField(owner *Error, line int, section, name string) *Error {
	names := sectionFieldNames[section]
	fields := strings.Join(names, ", ")
	msg := fmt.Sprintf("is not a %s field; want one of %s", section, fields)
	if s := suggest(name, names); s != "" {
		msg = fmt.Sprintf("is not a %s field; did you mean %q? Fields are %s", section, s, fields)
	}
	return &Error{Line: line, PolicyName: owner.PolicyName, PolicyIndex: owner.PolicyIndex, Field: section + "." + name, Msg: msg}
}

func unknownTopField(line int, name string) *Error {
	return &Error{Line: line, Field: name, Msg: "is not a top-level field; want " + strings.Join(topFieldNames, ", ") + " (policy settings go inside a policies: entry)"}
}

// walkFile checks the document's shape and each policy.
func (p *parser) walkFile(doc *yaml.Node) *File {
	root := deref(doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = deref(root.Content[0])
	}
	if isNull(root) {
		p.add(&Error{Line: root.Line, Msg: "the file has no content; want a top-level policies: field with a list of policies"})
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.add(&Error{Line: root.Line, Msg: "the file is not a mapping; want a top-level policies: field holding a list of policies"})
		return nil
	}
	fields := p.fields(root, nil, "")
	p.unknownFields(fields, topFieldNames, unknownTopField)
	kv, ok := fieldByName(fields, fPolicies)
	if !ok {
		p.add(&Error{Line: root.Line, Field: fPolicies, Msg: "is required; " + want[fPolicies]})
		return nil
	}
	seq := deref(kv.val)
	if isNull(seq) || (seq.Kind == yaml.SequenceNode && len(seq.Content) == 0) {
		p.add(&Error{Line: kv.key.Line, Field: fPolicies, Msg: "has no policies; " + want[fPolicies]})
		return nil
	}
	if seq.Kind != yaml.SequenceNode {
		p.add(&Error{Line: kv.key.Line, Field: fPolicies, Msg: "is not a list; " + want[fPolicies]})
		return nil
	}
	f := &File{}
	firstLine := map[string]int{}
	for i, item := range seq.Content {
		pol, ok := p.walkPolicy(i+1, deref(item))
		if pol.Name != "" {
			if l, dup := firstLine[pol.Name]; dup {
				p.add(&Error{Line: pol.Line, PolicyName: pol.Name, PolicyIndex: i + 1, Field: fName,
					Msg: fmt.Sprintf("duplicate name: policy #%d on line %d is already called %q; want a unique name", indexOf(seq, pol.Name), l, pol.Name)})
				ok = false
			} else {
				firstLine[pol.Name] = pol.Line
			}
		}
		if ok {
			f.Policies = append(f.Policies, pol)
		}
	}
	return f
}

// indexOf finds the 1-based position of the first policy called name.
func indexOf(seq *yaml.Node, name string) int {
	for i, item := range seq.Content {
		item = deref(item)
		if item.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(item.Content); j += 2 {
			if item.Content[j].Value == fName && deref(item.Content[j+1]).Value == name {
				return i + 1
			}
		}
	}
	return 0
}

type keyVal struct{ key, val *yaml.Node }

// fields lists a mapping's entries, reporting keys that are not plain
// strings, merge keys and duplicate keys (attributed to owner, which may be
// nil); prefix is prepended to the key to name the field in errors
// ("lease." for the lease mapping). The first occurrence of a key is
// listed, later ones are not.
func (p *parser) fields(m *yaml.Node, owner *Error, prefix string) []keyVal {
	var out []keyVal
	first := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		e := &Error{Line: k.Line, Field: prefix + k.Value}
		if owner != nil {
			e.PolicyName, e.PolicyIndex = owner.PolicyName, owner.PolicyIndex
		}
		if k.Kind != yaml.ScalarNode {
			e.Field = ""
			e.Msg = "a field name must be a plain string"
			p.add(e)
			continue
		}
		if k.Tag == "!!merge" || (k.Value == "<<" && k.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0) {
			e.Msg = "merge keys (<<) are not supported; write each field out"
			p.add(e)
			continue
		}
		if l, ok := first[k.Value]; ok {
			e.Msg = fmt.Sprintf("appears more than once (first on line %d); want each field at most once", l)
			p.add(e)
			continue
		}
		first[k.Value] = k.Line
		out = append(out, keyVal{k, v})
	}
	return out
}

func fieldByName(fields []keyVal, name string) (keyVal, bool) {
	for _, kv := range fields {
		if kv.key.Value == name {
			return kv, true
		}
	}
	return keyVal{}, false
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// policyWalk is the state of walking one entry of the policies list: the
// policy decoded so far and its fields. Each decode method reads one field
// (or a few that belong together) into pol, reporting problems to p.
type policyWalk struct {
	p        *parser
	m        *yaml.Node // the policy's mapping
	index    int
	id       *Error // identifies the policy in errors
	pol      *Policy
	fields   []keyVal // the mapping's fields, duplicates reported
	algKnown bool     // pol.Algorithm is a known algorithm
}

// walkPolicy validates one entry of the policies list. ok is false when the
// policy has any problem.
func (p *parser) walkPolicy(index int, m *yaml.Node) (pol Policy, ok bool) {
	nerrs := len(p.errs)
	pol.Line = m.Line
	id := &Error{PolicyIndex: index} // identifies the policy in errors
	if m.Kind != yaml.MappingNode {
		p.add(&Error{Line: m.Line, PolicyIndex: index, Msg: "is not a mapping; want fields like name: per-tenant and algorithm: token-bucket"})
		return pol, false
	}
	w := &policyWalk{p: p, m: m, index: index, id: id, pol: &pol}

	// The name first: every later error names the policy by it.
	w.name()
	w.fields = p.fields(m, id, "")
	p.unknownFields(w.fields, policyFieldNames, func(line int, name string) *Error { return unknownPolicyField(id, line, name) })
	p.lines = map[string]int{}
	p.noteLines(w.fields, "")

	w.algorithm()
	w.charge()
	if kv, found := w.get(fKey); found {
		pol.Key = p.key(id, kv)
	}
	w.required()
	pol.StartFull = pol.Algorithm == TokenBucket // the default start
	rateOK := w.rate()
	w.burst()
	w.start()
	w.limit()
	w.maxDuration()
	if kv, ok := w.present(fCancelGrace); ok {
		pol.CancelGraceNanos, _, _ = p.duration(id, kv, fCancelGrace)
	}
	w.window()
	w.calendar()

	p.clusterFields(id, &pol, w.algKnown, rateOK, w.get, w.present)

	if len(p.errs) > nerrs {
		return pol, false
	}
	return pol, w.validate()
}

// get finds any field of the policy.
func (w *policyWalk) get(name string) (keyVal, bool) { return fieldByName(w.fields, name) }

// present finds a field that applies to the policy's algorithm. A
// misplaced field is reported and not parsed; with an unknown algorithm
// every present field is parsed, to report format problems in the same
// run.
func (w *policyWalk) present(name string) (keyVal, bool) {
	kv, found := w.get(name)
	if !found {
		return kv, false
	}
	alg := w.pol.Algorithm
	if w.algKnown && !slices.Contains(algorithmFields[alg], name) {
		w.p.add(w.p.errAt(w.id, kv, name, fmt.Sprintf("does not apply to algorithm %s (%s is for %s); %s takes %s",
			alg, name, ownerAlgorithms(name), alg, strings.Join(algorithmFields[alg], ", "))))
		return kv, false
	}
	return kv, true
}

// missing reports that a required field is absent, at the policy's line.
func (w *policyWalk) missing(field, msg string) {
	w.p.add(&Error{Line: w.m.Line, PolicyName: w.id.PolicyName, PolicyIndex: w.index, Field: field, Msg: msg})
}

// name decodes the name, which also names the policy in later errors. It
// reads the fields quietly: the walk reports duplicates later.
func (w *policyWalk) name() {
	kv, found := fieldByName(fieldsQuiet(w.m), fName)
	if !found {
		w.missing(fName, "is required; "+want[fName])
		return
	}
	if s, ok := w.p.scalar(w.id, kv, fName); ok {
		if nameRE.MatchString(s) {
			w.pol.Name = s
			w.id.PolicyName = s
		} else {
			w.p.add(w.p.errAt(w.id, kv, fName, fmt.Sprintf("%q is not a valid name; %s", s, want[fName])))
		}
	}
}

// algorithm decodes the algorithm, noting whether it is a known one.
func (w *policyWalk) algorithm() {
	kv, found := w.get(fAlgorithm)
	if !found {
		w.missing(fAlgorithm, "is required; "+want[fAlgorithm])
		return
	}
	if s, ok := w.p.scalar(w.id, kv, fAlgorithm); ok {
		if _, known := algorithmFields[Algorithm(s)]; known {
			w.pol.Algorithm = Algorithm(s)
			w.algKnown = true
		} else {
			w.p.add(w.p.errAt(w.id, kv, fAlgorithm, fmt.Sprintf("%q is not an algorithm; %s", s, want[fAlgorithm])))
		}
	}
}

// charge decodes the charge unit, requests by default.
func (w *policyWalk) charge() {
	w.pol.Charge = ChargeRequests
	kv, found := w.get(fCharge)
	if !found {
		return
	}
	if s, ok := w.p.scalar(w.id, kv, fCharge); ok {
		switch Charge(s) {
		case ChargeRequests, ChargeCost:
			w.pol.Charge = Charge(s)
		default:
			w.p.add(w.p.errAt(w.id, kv, fCharge, fmt.Sprintf("%q is not a charge; %s", s, want[fCharge])))
		}
	}
}

// required reports the fields a known algorithm requires that are absent.
func (w *policyWalk) required() {
	if !w.algKnown {
		return
	}
	for _, name := range requiredFields[w.pol.Algorithm] {
		if _, found := w.get(name); !found {
			w.missing(name, fmt.Sprintf("is required for algorithm %s; %s", w.pol.Algorithm, want[name]))
		}
	}
}

// rate decodes the rate and its period, reporting whether it is valid.
func (w *policyWalk) rate() (ok bool) {
	if kv, found := w.present(fRate); found {
		w.pol.RateMilliPerSec, w.pol.RatePeriodNanos, ok = w.p.rate(w.id, kv)
	}
	return ok
}

// burst decodes the bucket size.
func (w *policyWalk) burst() {
	if kv, ok := w.present(fBurst); ok {
		w.pol.BurstMilli, _ = w.p.decimal(w.id, kv, fBurst, MaxBurst, false)
	}
}

// start decodes whether the bucket starts full or empty.
func (w *policyWalk) start() {
	kv, found := w.present(fStart)
	if !found {
		return
	}
	if s, ok := w.p.scalar(w.id, kv, fStart); ok {
		switch s {
		case "full":
			w.pol.StartFull = true
		case "empty":
			w.pol.StartFull = false
		default:
			w.p.add(w.p.errAt(w.id, kv, fStart, fmt.Sprintf("%q is not a start state; %s", s, want[fStart])))
		}
	}
}

// limit decodes the limit: whole slots for a concurrency policy, a
// decimal count per window otherwise.
func (w *policyWalk) limit() {
	kv, found := w.present(fLimit)
	if !found {
		return
	}
	if w.pol.Algorithm == Concurrency {
		n, _ := w.p.integer(w.id, kv, fLimit, 1, lease.MaxSlots)
		w.pol.LimitMilli = n * lease.MilliPerToken
	} else {
		w.pol.LimitMilli, _ = w.p.decimal(w.id, kv, fLimit, MaxLimit, true)
	}
}

// maxDuration decodes the longest a concurrency slot may be held.
func (w *policyWalk) maxDuration() {
	kv, found := w.present(fMaxDuration)
	if !found {
		return
	}
	d, s, ok := w.p.duration(w.id, kv, fMaxDuration)
	switch {
	case !ok:
	case d <= 0:
		w.p.fail(w.id, kv, fMaxDuration, fmt.Sprintf("%q is not positive (leave max_duration out for no limit)", s))
	case d < int64(MinMaxDuration):
		w.p.fail(w.id, kv, fMaxDuration, fmt.Sprintf("%q is shorter than the minimum %s: every request's context would end before it could do any work", s, formatDuration(int64(MinMaxDuration))))
	default:
		w.pol.MaxDurationNanos = d
	}
}

// window decodes a window policy's window length.
func (w *policyWalk) window() {
	kv, found := w.present(fWindow)
	if !found {
		return
	}
	s, ok := w.p.scalar(w.id, kv, fWindow)
	if !ok {
		return
	}
	d, err := parseWindow(s)
	switch {
	case err != nil:
		w.p.add(w.p.errAt(w.id, kv, fWindow, fmt.Sprintf("%q is not a duration; %s", s, want[fWindow])))
	case d <= 0:
		w.p.add(w.p.errAt(w.id, kv, fWindow, fmt.Sprintf("%q is not positive; %s", s, want[fWindow])))
	case d < MinWindow:
		w.p.add(w.p.errAt(w.id, kv, fWindow, fmt.Sprintf("%q is shorter than the minimum %s (simulate counts time in whole milliseconds); %s",
			s, formatWindow(int64(MinWindow)), want[fWindow])))
	default:
		w.pol.WindowNanos = int64(d)
	}
}

// calendar decodes a window policy's calendar period and time zone, and
// reports a window policy with neither window nor period.
func (w *policyWalk) calendar() {
	_, hasWindow := w.get(fWindow)
	kvPeriod, hasPeriod := w.present(fPeriod)
	if hasPeriod {
		if s, ok := w.p.scalar(w.id, kvPeriod, fPeriod); ok {
			w.pol.Period = s
		}
	}
	if kv, ok := w.present(fTimezone); ok {
		if s, ok := w.p.scalar(w.id, kv, fTimezone); ok {
			w.pol.Timezone = s
		}
	}
	if w.algKnown && w.pol.Algorithm.IsWindow() && !hasWindow && !hasPeriod {
		msg := fmt.Sprintf("is required for algorithm %s; %s", w.pol.Algorithm, want[fWindow])
		if w.pol.Algorithm == FixedWindow {
			msg += " (or period: day, week or month)"
		}
		w.missing(fWindow, msg)
	}
}

// validate runs Validate's checks on the walked policy, which has the last
// word, and through it the lease package, which builds one limiter.
// Nothing the walk accepts should fail here. Problems are reported at
// their field's line, or the policy's.
func (w *policyWalk) validate() bool {
	errs := validate(*w.pol)
	for _, e := range errs {
		e.Line, e.PolicyIndex = w.m.Line, w.index
		if l, ok := w.p.lines[e.Field]; ok {
			e.Line = l
		}
		w.p.add(e)
	}
	return len(errs) == 0
}

// fieldsQuiet lists a mapping's entries without reporting anything (the
// walk reports duplicates later); the first occurrence of a key wins.
func fieldsQuiet(m *yaml.Node) []keyVal {
	var out []keyVal
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if !seen[k.Value] {
			seen[k.Value] = true
			out = append(out, keyVal{k, m.Content[i+1]})
		}
	}
	return out
}

// ownerAlgorithms names the algorithms that take field name.
func ownerAlgorithms(name string) string {
	var algs []string
	for _, a := range Algorithms {
		if slices.Contains(algorithmFields[a], name) {
			algs = append(algs, string(a))
		}
	}
	return strings.Join(algs, ", ")
}

func (p *parser) errAt(id *Error, kv keyVal, field, msg string) *Error {
	return &Error{Line: valueLine(kv), PolicyName: id.PolicyName, PolicyIndex: id.PolicyIndex, Field: field, Msg: msg}
}

// valueLine is where a field's value is, for errors about it.
func valueLine(kv keyVal) int {
	if v := deref(kv.val); v != nil && v.Line > 0 {
		return v.Line
	}
	return kv.key.Line
}

// noteLines records the line of each field in p.lines, by its dotted name
// (prefix is "lease." for the lease mapping), for Validate's errors.
func (p *parser) noteLines(fields []keyVal, prefix string) {
	for _, kv := range fields {
		p.lines[prefix+kv.key.Value] = valueLine(kv)
	}
}

// scalar returns a field's text, reporting a missing or non-scalar value.
func (p *parser) scalar(id *Error, kv keyVal, field string) (string, bool) {
	v := deref(kv.val)
	switch {
	case isNull(v):
		p.add(p.errAt(id, kv, field, "has no value; "+wantFor(field)))
		return "", false
	case v.Kind == yaml.SequenceNode:
		p.add(p.errAt(id, kv, field, "is a list; "+wantFor(field)))
		return "", false
	case v.Kind != yaml.ScalarNode:
		p.add(p.errAt(id, kv, field, "is a mapping; "+wantFor(field)))
		return "", false
	}
	return v.Value, true
}

// milliValue reads field as a number in milli-units and reports the
// problems decimal and integer share; whole requires whole units.
func (p *parser) milliValue(id *Error, kv keyVal, field string, maxUnits int64, whole bool) (string, int64, bool) {
	s, ok := p.scalar(id, kv, field)
	if !ok {
		return s, 0, false
	}
	v, err := ParseMilli(s)
	msg := ""
	switch {
	case errors.Is(err, ErrExponent):
		msg = fmt.Sprintf("%q %v; write the number out, like 1000", s, err)
	case errors.Is(err, ErrTooLarge):
		msg = fmt.Sprintf("%q is more than the maximum %d", s, maxUnits)
	case errors.Is(err, ErrTooPrecise) && whole, err == nil && whole && v%1000 != 0:
		msg = fmt.Sprintf("%q is not a whole number", s)
	case err != nil:
		msg = fmt.Sprintf("%q %v", s, err)
	}
	if msg != "" {
		p.fail(id, kv, field, msg)
		return s, 0, false
	}
	return s, v, true
}

// fail reports a problem with a field's value and what would be valid.
func (p *parser) fail(id *Error, kv keyVal, field, msg string) {
	p.add(p.errAt(id, kv, field, msg+"; "+wantFor(field)))
}

// rate parses a token bucket's rate: a decimal number of tokens per second
// (10, 0.5), or tokens per interval, amount/interval (1/m, 100/h, 5/s,
// 3/30s, 2/1d), exact however small. A rate per second written either way
// is the same policy (period 0).
func (p *parser) rate(id *Error, kv keyVal) (milli, periodNanos int64, ok bool) {
	s, ok := p.scalar(id, kv, fRate)
	if !ok {
		return 0, 0, false
	}
	amount, per, found := strings.Cut(s, "/")
	if !found {
		v, ok := p.decimal(id, kv, fRate, MaxRate, false)
		return v, 0, ok
	}
	period, err := ParseRatePeriod(strings.TrimSpace(per))
	if err != nil {
		p.fail(id, kv, fRate, fmt.Sprintf("%q: %v", s, err))
		return 0, 0, false
	}
	amount = strings.TrimSpace(amount)
	v, err := ParseMilli(amount)
	msg := ""
	switch {
	case errors.Is(err, ErrTooLarge), err == nil && v > MaxRate*1000:
		msg = fmt.Sprintf("%q is more than the maximum %d per interval", s, MaxRate)
	case err != nil:
		msg = fmt.Sprintf("%q: the amount %q %v", s, amount, err)
	case v == 0:
		msg = fmt.Sprintf("%q is zero; it must be greater than 0", s)
	}
	if msg != "" {
		p.fail(id, kv, fRate, msg)
		return 0, 0, false
	}
	if period == lease.NanosPerSecond {
		period = 0
	}
	return v, period, true
}

// ParseRatePeriod parses the interval of a rate per interval: a unit alone
// (s, m, h, d: one second, minute, hour or day) or a whole number and a
// unit (30s, 5m, 2h, 1d), from one second to one day.
func ParseRatePeriod(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("has no interval after the '/'")
	}
	units := map[byte]int64{'s': 1, 'm': 60, 'h': 3600, 'd': 86400}
	unit, ok := units[s[len(s)-1]]
	if !ok {
		return 0, fmt.Errorf("the interval %q does not end in s, m, h or d", s)
	}
	n := int64(1)
	if digits := s[:len(s)-1]; digits != "" {
		v, err := strconv.ParseInt(digits, 10, 64)
		if err != nil || v <= 0 || digits[0] == '+' {
			return 0, fmt.Errorf("the interval %q is not a whole number of s, m, h or d", s)
		}
		n = v
	}
	if n > 86400/unit {
		return 0, fmt.Errorf("the interval %q is longer than one day", s)
	}
	return n * unit * lease.NanosPerSecond, nil
}

// decimal parses a positive number of units into milli-units.
func (p *parser) decimal(id *Error, kv keyVal, field string, maxUnits int64, whole bool) (int64, bool) {
	s, v, ok := p.milliValue(id, kv, field, maxUnits, whole)
	if !ok {
		return 0, false
	}
	msg := ""
	switch {
	case v == 0:
		msg = fmt.Sprintf("%q is zero; it must be greater than 0", s)
	case v > maxUnits*1000:
		msg = fmt.Sprintf("%q is more than the maximum %d", s, maxUnits)
	case field == fBurst && v < 1000:
		msg = fmt.Sprintf("%q is less than 1, so no request could ever fit (the smallest request costs 1)", s)
	}
	if msg != "" {
		p.fail(id, kv, field, msg)
		return 0, false
	}
	return v, true
}

// integer parses a whole number in [lo, hi].
func (p *parser) integer(id *Error, kv keyVal, field string, lo, hi int64) (int64, bool) {
	s, v, ok := p.milliValue(id, kv, field, hi, true)
	if !ok {
		return 0, false
	}
	if msg := intRangeProblem(v/1000, lo, hi); msg != "" {
		p.fail(id, kv, field, fmt.Sprintf("%q %s", s, msg))
		return 0, false
	}
	return v / 1000, true
}

// duration parses a Go duration.
func (p *parser) duration(id *Error, kv keyVal, field string) (nanos int64, text string, ok bool) {
	s, ok := p.scalar(id, kv, field)
	if !ok {
		return 0, "", false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		p.add(p.errAt(id, kv, field, fmt.Sprintf("%q is not a duration; %s", s, wantFor(field))))
		return 0, s, false
	}
	return int64(d), s, true
}

// key validates the key attribute list.
func (p *parser) key(id *Error, kv keyVal) []string {
	v := deref(kv.val)
	if v.Kind != yaml.SequenceNode {
		if isNull(v) {
			p.add(p.errAt(id, kv, fKey, "has no value; "+want[fKey]+" (leave key out, or write [], for one shared budget)"))
		} else {
			p.add(p.errAt(id, kv, fKey, "is not a list; "+want[fKey]))
		}
		return nil
	}
	out := []string{}
	seen := map[string]bool{}
	for _, item := range v.Content {
		item := deref(item)
		e := &Error{Line: item.Line, PolicyName: id.PolicyName, PolicyIndex: id.PolicyIndex, Field: fKey}
		switch {
		case item.Kind != yaml.ScalarNode || isNull(item):
			e.Msg = "has an entry that is not an attribute name; " + want[fKey]
		default:
			e.Msg = keyAttrProblem(item.Value, seen)
		}
		if e.Msg != "" {
			p.add(e)
			continue
		}
		seen[item.Value] = true
		out = append(out, item.Value)
	}
	return out
}

// suggest returns the candidate within edit distance 2 of s, if exactly one
// is closest.
func suggest(s string, candidates []string) string {
	best, bestD, ties := "", 3, 0
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), c)
		switch {
		case d < bestD:
			best, bestD, ties = c, d, 0
		case d == bestD:
			ties++
		}
	}
	if best == "" || ties > 0 {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// parseWindow reads a window: a Go duration, or whole days like 7d.
func parseWindow(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days > int64(lease.MaxWindowNanos/int64(24*time.Hour))*1000 {
			return 0, fmt.Errorf("not a number of days: %q", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}
