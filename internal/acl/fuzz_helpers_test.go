package acl

import (
	"errors"
	"strings"
	"testing"
)

// leaksSecret reports whether err's message repeats some of text, the
// input of ParseSecret: any 12 bytes in a row of what follows the prefix
// (all of it when it has 8 to 11 bytes; shorter text is too short to tell
// from the message's own words). The prefix itself is public.
func leaksSecret(text string, err error) bool {
	rest := strings.TrimPrefix(text, SecretPrefix)
	if len(rest) < 8 {
		return false
	}
	w := min(12, len(rest))
	msg := err.Error()
	for i := 0; i+w <= len(rest); i++ {
		if strings.Contains(msg, rest[i:i+w]) {
			return true
		}
	}
	return false
}

// Every way ParseSecret refuses hides the text; the check itself catches
// an error that repeats it (negative control).
func TestParseSecretErrorsHideTheText(t *testing.T) {
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	good := s.String()
	for name, text := range map[string]string{
		"typo (not base64url)": good[:20] + "!" + good[21:],
		"one character short":  good[:len(good)-1],
		"one character more":   good + "A",
		"wrong prefix":         "nation_" + good[len(SecretPrefix):],
		"no prefix":            good[len(SecretPrefix):] + "1234567",
		"not canonical":        good[:len(good)-1] + "B",
	} {
		_, err := ParseSecret(text)
		if err == nil {
			if name == "not canonical" {
				continue // the last character happened to be canonical
			}
			t.Fatalf("%s: accepted", name)
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v is not ErrMalformed", name, err)
		}
		if leaksSecret(text, err) {
			t.Errorf("%s: the error repeats the text: %v", name, err)
		}
	}
	leaky := errors.New("malformed token: " + good[30:45] + " is not base64url")
	if !leaksSecret(good, leaky) {
		t.Error("leaksSecret missed an error that repeats 15 bytes of the secret")
	}
}
