package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Suggest returns the candidate closest to name, or "" when none is close
// enough to be a likely typo: at most one edit away for a name of up to 6
// characters, two for longer ones, or the same up to '-', '_' and case.
func Suggest(name string, candidates []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("-", "", "_", "").Replace(strings.ToLower(s))
	}
	limit := 1
	if len(name) > 6 {
		limit = 2
	}
	best, bestD := "", limit+1
	for _, c := range candidates {
		if c == name {
			continue
		}
		d := EditDistance(name, c)
		if norm(c) == norm(name) {
			d = 0
		}
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// EditDistance is the Damerau-Levenshtein distance (optimal string
// alignment) between a and b: insertions, deletions, substitutions and
// transpositions of two neighbours each count one. gpucached's and the
// gpucache CLI's "did you mean" suggestions both use it.
func EditDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// FlagError is a command-line flag Load could not parse: unknown, without
// its value, or with a malformed one. It is not ErrInvalid, which means a
// config that parsed but is refused.
type FlagError struct{ msg string }

func (e *FlagError) Error() string { return e.msg }

// flagError turns the flag package's parse error into one line that says
// what to do: an unknown flag names the closest real one.
func flagError(err error, flags []string) error {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		// "invalid value ... for flag -x: ...", "flag needs an argument: -x":
		// name the flag as it is documented, with two dashes.
		msg := strings.NewReplacer("for flag -", "for flag --", "argument: -", "argument: --").Replace(err.Error())
		return &FlagError{msg + " (gpucached --help lists every flag)"}
	}
	msg := "unknown flag --" + name
	if s := Suggest(name, flags); s != "" {
		msg += "; did you mean --" + s + "?"
	}
	return &FlagError{msg + " (gpucached --help lists every flag)"}
}

var unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)

// yamlError rewrites the YAML decoder's errors for path: an unknown key
// names the file, its line and the closest known key of that section
// instead of a Go type.
func yamlError(path string, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%w: config file %s: %v", ErrInvalid, path, err)
	}
	keys := yamlKeys()
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		m := unknownField.FindStringSubmatch(e)
		if m == nil {
			msgs = append(msgs, fmt.Sprintf("config file %s %s", path, e))
			continue
		}
		msg := fmt.Sprintf("unknown setting %q in %s line %s", m[2], path, m[1])
		if s := Suggest(m[2], keys[m[3]]); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		} else if m[3] == reflect.TypeFor[Config]().String() {
			msg += "; docs/CONFIG.md lists every setting"
		}
		msgs = append(msgs, msg)
	}
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "; "))
}

// yamlKeys maps the name of every struct type reachable from Config, as
// the YAML decoder spells it ("config.Config"), to its YAML keys.
func yamlKeys() map[string][]string {
	out := map[string][]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return
		}
		if _, seen := out[t.String()]; seen {
			return
		}
		out[t.String()] = nil
		var keys []string
		for f := range t.Fields() {
			tag := f.Tag.Get("yaml")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if strings.Contains(opts, "inline") {
				walk(f.Type)
				keys = append(keys, out[f.Type.String()]...)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			keys = append(keys, name)
			walk(f.Type)
		}
		slices.Sort(keys)
		out[t.String()] = keys
	}
	walk(reflect.TypeFor[Config]())
	return out
}
