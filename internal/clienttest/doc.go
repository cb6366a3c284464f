// Package clienttest holds the end-to-end tests of the public client
// (github.com/gpucache/gpucache/client) against real in-process servers,
// and the client's runnable examples. They live in the product module
// because they start internal/server, which the client module must not
// require (ADR 0028); the client's own module keeps the tests that need no
// server (fake peers, fuzzing, encodings). The package has no code of its
// own: its tests import the client with a dot import, so the test bodies
// read as they did inside the client package.
package clienttest
