package cliutil

import (
	"errors"
	"strconv"
	"strings"
)

// Bytes is a flag of a positive number of bytes written with binary
// units: 256MiB, 10GiB, 1T, 4096.
type Bytes int64

var byteUnits = []struct {
	suffix string
	n      int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}}

// String is the size in the largest binary unit that divides it.
func (b Bytes) String() string {
	v := int64(b)
	for _, u := range byteUnits[:4] {
		if v >= u.n && v%u.n == 0 {
			return strconv.FormatInt(v/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(v, 10)
}

// Set parses s.
func (b *Bytes) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = Bytes(n)
	return nil
}

// Type names the flag's value in --help.
func (b *Bytes) Type() string { return "size" }

// ParseBytes reads a positive size with an optional binary unit.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, errors.New("want a size such as 512MiB or 10GiB")
	}
	return n * mult, nil
}
