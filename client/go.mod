module github.com/gpucache/gpucache/client

go 1.26.8

require (
	github.com/gpucache/gpucache/api v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
)

// Inside the repository the client builds against the api/ beside it; a
// release tags api/vX.Y.Z and requires that version here (ADR 0028).
replace github.com/gpucache/gpucache/api => ../api
