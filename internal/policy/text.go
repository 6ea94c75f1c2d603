package policy

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// checkText reports a file that is not text: a NUL byte (a binary file) or
// bytes that are not UTF-8, by line and column (1-based, in bytes) of the
// first bad byte. YAML is UTF-8 text, and the cluster's API carries the
// file as a protobuf string, which must be valid UTF-8.
func checkText(data []byte) *Error {
	if i := bytes.IndexByte(data, 0); i >= 0 {
		line, col := position(data, i)
		return &Error{Line: line, Msg: fmt.Sprintf("column %d: a NUL byte: the file is binary, not text; want a YAML policy file in UTF-8", col)}
	}
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			line, col := position(data, i)
			return &Error{Line: line, Msg: fmt.Sprintf("column %d: byte 0x%02x is not valid UTF-8: the file is not UTF-8 text; want a YAML policy file in UTF-8", col, data[i])}
		}
		i += size
	}
	return nil
}

// CheckText is checkText for callers that send a policy file on without
// parsing it (rationctl policy apply); name, if not empty, is put in the
// error as its file.
func CheckText(name string, data []byte) error {
	if e := checkText(data); e != nil {
		e.File = name
		return e
	}
	return nil
}

// position is the 1-based line and byte column of data[i].
func position(data []byte, i int) (line, col int) {
	line = 1 + bytes.Count(data[:i], []byte{'\n'})
	return line, i - bytes.LastIndexByte(data[:i], '\n')
}
