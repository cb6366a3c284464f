// Command gpucache is the gpucache client: put, get, stat, bench and more.
package main
