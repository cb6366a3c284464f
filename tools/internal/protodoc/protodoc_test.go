package main

import (
	"strings"
	"testing"
)

// docs/PROTOCOL.md is exactly what the generator writes from api/wire's
// package comment now: a change of the specification that did not
// regenerate it, or a hand edit of the generated file, fails here, with the
// command that fixes it.
func TestProtocolDocUpToDate(t *testing.T) {
	generated.TestUpToDate(t)
}

// The specification's first sentence names the versions this package
// speaks, as the generated title does.
func TestPackageDocNamesVersionMax(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	text, err := PackageDoc(root)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(text)
	if err != nil {
		t.Fatal(err)
	}
	title, _, _ := strings.Cut(string(out), "\n")
	versions := strings.TrimPrefix(title, "# gpucache wire protocol, ")
	first, _, _ := strings.Cut(text, ".")
	if !strings.Contains(first, versions) {
		t.Errorf("the package comment's first sentence %q does not name %q, the versions of wire.VersionMax", first, versions)
	}
}

func TestRender(t *testing.T) {
	const in = `Intro with max_batch, a *Error, keys[0..n) and <b>.

# Heading

GET (3). Request, GetRequest:

	u32  count
	list keys

A list:
  - one item
    that wraps
  - 2. not a number

Steps:
 1. first
 2. second

A paragraph whose line
1. starts like a list, and
- like a bullet, and
# like a heading.

PING (7). Echo.

HELLO (1). Open.

LOOKUP (2). Look.

PUT (4). Put.

DELETE (5). Delete.

STAT (6). Stat.

ACQUIRE (8). A.

FILL_COMMIT (9). C.

FILL_ABORT (10). A.

WAIT (11). W.

MEMBERS (12). M.

PUT_OPAQUE (13). P.

REGISTER (14). R.

UNREGISTER (15). U.

GET_INTO (16). G.

PUT_FROM (17). P.

PUT_OPAQUE_FROM (18). P.
`
	out, err := Render(in)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"\nIntro with max_batch, a \\*Error, keys\\[0..n) and \\<b>.\n",
		"\n## Heading\n",
		"\n### GET (3)\n\nRequest, GetRequest:\n\n```\nu32  count\nlist keys\n```\n",
		"\n- one item\n  that wraps\n- 2\\. not a number\n",
		"\n1. first\n2. second\n",
		"\nA paragraph whose line\n1\\. starts like a list, and\n\\- like a bullet, and\n\\# like a heading.\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered text lacks %q:\n%s", want, got)
		}
	}

	if _, err := Render("HELLO (1). Only one operation.\n"); err == nil || !strings.Contains(err.Error(), "LOOKUP (2) has no section") {
		t.Errorf("a missing operation section: err = %v", err)
	}
	if _, err := Render(strings.Replace(in, "PING (7). Echo.", "PING (8). Echo.", 1)); err == nil || !strings.Contains(err.Error(), "PING (8)") {
		t.Errorf("a wrong opcode in a run-in title: err = %v", err)
	}
}
