package policy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem found in a policy file. It wraps ErrInvalidPolicy.
type Error struct {
	// File is the path given to ParseFile; empty for Parse.
	File string
	// Line is the 1-based line in the file, or 0 when not known.
	Line int
	// PolicyName is the policy's name when it has a valid one.
	PolicyName string
	// PolicyIndex is the policy's 1-based position in the policies list,
	// or 0 for a problem that is not inside a policy.
	PolicyIndex int
	// Field is the field the problem is in, or empty.
	Field string
	// Msg says what is wrong and what would be valid.
	Msg string
}

// Error formats the problem as
//
//	file: line N: policy "name": field "rate": <what is wrong>; want <what is valid>
//
// leaving out the parts that do not apply (the file when it is not known),
// with policy #N for a policy without a valid name.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s: line %d: ", e.File, e.Line)
	case e.File != "":
		fmt.Fprintf(&b, "%s: ", e.File)
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if l := e.PolicyLabel(); l != "" {
		b.WriteString(l)
		b.WriteString(": ")
	}
	if e.Field != "" {
		fmt.Fprintf(&b, "field %q: ", e.Field)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// PolicyLabel is how the error names its policy: `policy "name"`,
// `policy #2`, or "" outside any policy.
func (e *Error) PolicyLabel() string {
	switch {
	case e.PolicyName != "":
		return fmt.Sprintf("policy %q", e.PolicyName)
	case e.PolicyIndex > 0:
		return fmt.Sprintf("policy #%d", e.PolicyIndex)
	}
	return ""
}

// Unwrap makes errors.Is(err, ErrInvalidPolicy) true.
func (e *Error) Unwrap() error { return ErrInvalidPolicy }

// joinErrors orders errs by line (stable, so problems on one line keep the
// order they were found in), drops exact duplicates and joins them.
func joinErrors(errs []*Error) error {
	slices.SortStableFunc(errs, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	seen := make(map[string]bool, len(errs))
	out := make([]error, 0, len(errs))
	for _, e := range errs {
		s := e.Error()
		if seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, e)
	}
	return errors.Join(out...)
}

// Errors returns the individual problems in an error returned by Parse or
// ParseFile, or nil when err carries none.
func Errors(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if e, ok := err.(*Error); ok {
			out = append(out, e)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}
