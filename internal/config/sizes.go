package config

import (
	"fmt"
	"log/slog"
	"reflect"
	"strings"
)

// Describe formats the size in bytes and in the nearest binary unit:
// "1000000000 bytes (953.67 MiB)", so a decimal suffix ("1GB", 10^9
// bytes) is never mistaken for a binary one.
func (b ByteSize) Describe() string {
	n := float64(b)
	for _, u := range []struct {
		name string
		mult float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.mult {
			return fmt.Sprintf("%d bytes (%.2f %s)", int64(b), n/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", int64(b))
}

// SizeAttrs returns every size setting of cfg (its ByteSize fields, by
// YAML name) described in bytes and binary units, for the start-up log.
func SizeAttrs(cfg Config) []any {
	var out []any
	v := reflect.ValueOf(cfg)
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type != reflect.TypeFor[ByteSize]() || !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			name = f.Name
		}
		out = append(out, slog.String(name, v.Field(i).Interface().(ByteSize).Describe()))
	}
	return out
}

// Human formats the size for a message: its exact form when that is a
// whole number of a binary unit ("64MiB"), else the nearest binary unit
// with one decimal ("23.5 GiB"), never a long count of KiB.
func (b ByteSize) Human() string {
	if s := b.String(); strings.HasSuffix(s, "iB") && len(s)-len("KiB") <= 4 {
		return s
	}
	if b < 1<<10 {
		return fmt.Sprintf("%d bytes", int64(b))
	}
	return IEC(uint64(b))
}

// IEC prints n bytes in the largest binary unit it reaches, with one
// decimal ("23.5 GiB"), or as "N B" below 1 KiB. Messages and the CLI's
// byte counts use it.
func IEC(n uint64) string {
	if n < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	const units = "KMGTPE"
	u, f := 0, float64(n)/(1<<10)
	for u < len(units)-1 && f >= 1<<10 {
		u, f = u+1, f/(1<<10)
	}
	return fmt.Sprintf("%.1f %ciB", f, units[u])
}
