package main

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// # Environment variables
//
// Every flag of rationd, rationd dev and rationd edge can also be set by
// an environment variable: RATION_ and the flag's name in upper case with
// dashes as underscores (--renew-after: RATION_RENEW_AFTER). A flag given
// on the command line wins over its variable; a variable set to the empty
// string counts as unset. One implementation (parseArgs) serves every flag
// set, and withEnvUsage lists each variable beside its flag in -h.
// docs/operations.md, "Configuration from the environment".

// envPrefix starts every variable that sets a flag.
const envPrefix = "RATION_"

// envName is the variable that sets the flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// withEnvUsage appends each flag's variable to its usage text, so that
// -h lists it beside the flag (on a line of its own, before the default).
func withEnvUsage(fs *flag.FlagSet) *flag.FlagSet {
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += "\n$" + envName(f.Name)
	})
	return fs
}

// envSet records the flags their variables set: flag name -> variable.
type envSet map[string]string

// fromEnv sets every flag of fs the command line left unset whose
// variable lookup finds non-empty. A value the flag refuses is a
// *usageError naming the variable, its value and the flag.
func fromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) (envSet, error) {
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	set := envSet{}
	var errs []string
	fs.VisitAll(func(f *flag.Flag) {
		if onCommandLine[f.Name] {
			return
		}
		name := envName(f.Name)
		v, ok := lookup(name)
		if !ok || v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q: %s for --%s", name, v, explainSetError(f, v, err), f.Name))
			return
		}
		set[f.Name] = name
	})
	if len(errs) > 0 {
		return nil, &usageError{msg: strings.Join(errs, "; ")}
	}
	return set, nil
}

// explainSetError says what a flag's Set refused, in words: the flag
// package's own values say only "parse error". Whether a number is out of
// range is decided by parsing v again, not by the error's text.
func explainSetError(f *flag.Flag, v string, err error) string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err.Error()
	}
	kind := ""
	switch g.Get().(type) {
	case bool:
		return "invalid boolean (want true or false)"
	case time.Duration:
		return "invalid duration (want e.g. 500ms, 10s, 1m30s)"
	case int, int64, uint, uint64:
		kind = "integer"
	case float64:
		kind = "number"
	default:
		return err.Error()
	}
	if outOfRange(g.Get(), v) {
		return kind + " out of range"
	}
	return "invalid " + kind
}

// outOfRange reports whether v is a number too large for a flag holding
// val, parsed as the flag package parses it.
func outOfRange(val any, v string) bool {
	var err error
	switch val.(type) {
	case int:
		_, err = strconv.ParseInt(v, 0, strconv.IntSize)
	case int64:
		_, err = strconv.ParseInt(v, 0, 64)
	case uint:
		_, err = strconv.ParseUint(v, 0, strconv.IntSize)
	case uint64:
		_, err = strconv.ParseUint(v, 0, 64)
	case float64:
		_, err = strconv.ParseFloat(v, 64)
	}
	return errors.Is(err, strconv.ErrRange)
}

// explain names the variable behind every flag an error mentions that a
// variable set, so a configuration the server cannot use points at where
// the value came from: "--raft-addr ... (set by RATION_RAFT_ADDR)".
func (e envSet) explain(err error) error {
	if err == nil || len(e) == 0 {
		return err
	}
	msg := err.Error()
	var from []string
	for name, env := range e {
		if mentionsFlag(msg, name) {
			from = append(from, env)
		}
	}
	if len(from) == 0 {
		return err
	}
	sort.Strings(from)
	return &explained{err: err, note: " (set by " + strings.Join(from, ", ") + ")"}
}

// explained is an error with a note on where its values came from; it
// unwraps to the original, so errors.As still finds a *usageError.
type explained struct {
	err  error
	note string
}

func (e *explained) Error() string { return e.err.Error() + e.note }
func (e *explained) Unwrap() error { return e.err }

// mentionsFlag: msg names --name as a whole flag (--envoy-config is not
// mentioned by "--envoy-config-reload").
func mentionsFlag(msg, name string) bool {
	flagText := "--" + name
	for i := 0; ; {
		j := strings.Index(msg[i:], flagText)
		if j < 0 {
			return false
		}
		end := i + j + len(flagText)
		if end == len(msg) || !isFlagChar(msg[end]) {
			return true
		}
		i = end
	}
}

func isFlagChar(c byte) bool {
	return c == '-' || c == '_' || ('a' <= c && c <= 'z') || ('0' <= c && c <= '9')
}
