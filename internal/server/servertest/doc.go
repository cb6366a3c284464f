// Package servertest runs a real gpucache server over a small hot store on
// a loopback port, for the tests of packages that talk to one (client, cli,
// bench). Only tests import it.
package servertest
