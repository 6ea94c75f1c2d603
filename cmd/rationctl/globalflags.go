package main

import (
	"fmt"
	"strings"
)

// Connection and output flags before the command, as etcdctl and kubectl
// take them: "rationctl --servers 127.0.0.1:7400 status" is
// "rationctl status --servers 127.0.0.1:7400". The leading flags are moved
// to just after the command's words (after "policy get" for a group), so
// the command's own flag set parses them, values are checked in one place,
// and a flag repeated after the command wins (it is parsed later).

// globalFlags are the flags accepted before the command; valued says
// whether the flag takes a value (given as the next argument or after =).
var globalFlags = map[string]bool{
	"servers": true,
	"timeout": true,
	"json":    false,
	// tls.go
	"tls-ca-file":     true,
	"tls-cert-file":   true,
	"tls-key-file":    true,
	"tls-server-name": true,
	// token.go
	"token":      true,
	"token-file": true,
}

// splitGlobal returns the leading global flags of args and the rest, which
// starts with the command name. A leading flag that is not a global flag
// is an error; "--" ends the leading flags.
func splitGlobal(args []string) (globals, rest []string, err error) {
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			return globals, args[1:], nil
		}
		switch a {
		case "-", "-h", "-help", "--help":
			return globals, args, nil // help is a command of its own
		}
		if !strings.HasPrefix(a, "-") {
			break
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		valued, ok := globalFlags[name]
		if !ok {
			return nil, nil, fmt.Errorf("flag %q before the command is not one of --servers, --timeout, --json, --tls-ca-file, --tls-cert-file, --tls-key-file, --tls-server-name, --token, --token-file; put a command's own flags after it", a)
		}
		globals = append(globals, a)
		args = args[1:]
		if valued && !hasValue {
			if len(args) == 0 {
				return nil, nil, fmt.Errorf("flag %q needs a value", a)
			}
			globals = append(globals, args[0])
			args = args[1:]
		}
	}
	return globals, args, nil
}

// withGlobals puts the leading global flags into the arguments of command
// c (args are those after its name): after the verb for a group, so that
// "policy" still sees the verb first.
func withGlobals(c command, globals, args []string) []string {
	if len(globals) == 0 {
		return args
	}
	out := make([]string, 0, len(globals)+len(args))
	if c.group && len(args) > 0 {
		if strings.HasPrefix(args[0], "-") {
			// "policy -h": the group reads only its first argument.
			return append(append(out, args...), globals...)
		}
		n := 1
		if c.nested[args[0]] && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
			n = 2
		}
		out = append(out, args[:n]...)
		args = args[n:]
	}
	out = append(out, globals...)
	return append(out, args...)
}
