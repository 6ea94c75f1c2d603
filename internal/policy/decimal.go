package policy

import "errors"

// Errors returned by ParseMilli. Their text is a predicate meant to follow
// the quoted input, as in `"1.2345" has more than 3 decimal places`.
var (
	ErrNotNumber  = errors.New("is not a number")
	ErrNegative   = errors.New("is negative")
	ErrExponent   = errors.New("uses exponent notation, which is not supported")
	ErrTooPrecise = errors.New("has more than 3 decimal places")
	ErrTooLarge   = errors.New("is too large")
)

// MaxParseMilli bounds ParseMilli: a number whose whole part exceeds
// MaxParseMilli/1000 (10^15 units) is ErrTooLarge, so every result fits in
// int64 with room to spare.
const MaxParseMilli = int64(1e18)

// ParseMilli parses a non-negative decimal number with at most 3 fractional
// digits into thousandths, exactly: "10" -> 10000, "0.5" -> 500,
// "12.345" -> 12345, ".5" -> 500, "2." -> 2000. Trailing zeros beyond the
// third decimal are allowed because they lose nothing ("1.5000" -> 1500).
// Signs, exponents ("1e3"), digit separators, spaces, hex and the like are
// rejected. It does not allocate.
func ParseMilli(s string) (int64, error) {
	if s == "" {
		return 0, ErrNotNumber
	}
	if s[0] == '-' {
		if _, err := ParseMilli(s[1:]); err == nil {
			return 0, ErrNegative
		}
		return 0, ErrNotNumber
	}
	var v int64
	i, digits := 0, 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		v = v*10 + int64(s[i]-'0')
		digits++
		if v > MaxParseMilli/1000 {
			return 0, tooLargeOrNaN(s)
		}
	}
	v *= 1000
	if i < len(s) && s[i] == '.' {
		i++
		scale := int64(100)
		for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
			d := int64(s[i] - '0')
			digits++
			if scale == 0 {
				if d != 0 {
					if isNumberTail(s[i:]) {
						return 0, ErrTooPrecise
					}
					return 0, ErrNotNumber
				}
				continue
			}
			v += d * scale
			scale /= 10
		}
	}
	if digits == 0 {
		return 0, ErrNotNumber
	}
	if i < len(s) {
		if (s[i] == 'e' || s[i] == 'E') && isExponent(s[i+1:]) {
			return 0, ErrExponent
		}
		return 0, ErrNotNumber
	}
	return v, nil
}

// tooLargeOrNaN distinguishes "99999999999999999999" from "9999999999999999x".
func tooLargeOrNaN(s string) error {
	if isNumberTail(s) {
		return ErrTooLarge
	}
	return ErrNotNumber
}

// isNumberTail reports whether s is digits, optionally followed by a
// fractional part: what may follow once parsing has stopped for a reason
// other than syntax.
func isNumberTail(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	return i == len(s)
}

func isExponent(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatMilli formats thousandths with exactly 3 decimals: 1500 -> "1.500",
// -5 -> "-0.005". It appends to dst and returns the extended slice.
func FormatMilli(dst []byte, v int64) []byte {
	u := uint64(v)
	if v < 0 {
		dst = append(dst, '-')
		u = uint64(-v) // correct for math.MinInt64 too, as uint64
	}
	dst = appendUint(dst, u/1000)
	frac := u % 1000
	return append(dst, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

func appendUint(dst []byte, u uint64) []byte {
	var buf [20]byte
	i := len(buf)
	for u >= 10 {
		i--
		buf[i] = byte('0' + u%10)
		u /= 10
	}
	i--
	buf[i] = byte('0' + u)
	return append(dst, buf[i:]...)
}
