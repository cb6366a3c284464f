package server

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"sync"
	"testing"
)

// mpKey is an LMCache MP-mode key of the test model.
func mpKey(i int) string { return fmt.Sprintf("%s@00000000@0@%064x", respModel, i) }

const chunk32 = 32 << 20

// writeChunk sends the C++ client's SET of a 32 MiB chunk: the chunk is
// body with its first 8 bytes replaced by tag.
func writeChunkSET(c *respClient, key string, tag uint64, body []byte) {
	c.t.Helper()
	var hdr bytes.Buffer
	fmt.Fprintf(&hdr, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(key), key, len(body))
	var t [8]byte
	for i := range t {
		t[i] = byte(tag >> (8 * i))
	}
	hdr.Write(t[:])
	c.write(hdr.Bytes())
	c.write(body[8:])
	c.write([]byte("\r\n"))
}

// expectChunk reads a GET reply and checks it is exactly
// "$33554432\r\n" + the tagged chunk + "\r\n", streaming the comparison.
func expectChunk(c *respClient, tag uint64, body []byte) {
	c.t.Helper()
	if err := expectChunkErr(c, tag, body); err != nil {
		c.t.Fatal(err)
	}
}

func expectChunkErr(c *respClient, tag uint64, body []byte) error {
	want := "$" + strconv.Itoa(len(body)) + "\r\n"
	got := make([]byte, len(want)+8)
	if _, err := io.ReadFull(c.br, got); err != nil {
		return err
	}
	var tb [8]byte
	for i := range tb {
		tb[i] = byte(tag >> (8 * i))
	}
	if string(got[:len(want)]) != want || !bytes.Equal(got[len(want):], tb[:]) {
		return fmt.Errorf("reply starts %q, want %q + tag %x", got, want, tb)
	}
	buf := make([]byte, 1<<20)
	for off := 8; off < len(body); {
		n := min(len(buf), len(body)-off)
		if _, err := io.ReadFull(c.br, buf[:n]); err != nil {
			return err
		}
		if !bytes.Equal(buf[:n], body[off:off+n]) {
			return fmt.Errorf("payload differs in [%d, %d)", off, off+n)
		}
		off += n
	}
	var end [2]byte
	if _, err := io.ReadFull(c.br, end[:]); err != nil || string(end[:]) != "\r\n" {
		return fmt.Errorf("payload not followed by CRLF: %q %v", end, err)
	}
	return nil
}

// TestRESPReplaysMPClient replays the byte sequences of LMCache's C++ RESP
// client (csrc/storage_backends/redis/connector.cpp: one connection per
// worker, one command outstanding, full chunks only) and compares every
// reply byte for byte.
func TestRESPReplaysMPClient(t *testing.T) {
	store := bigStore(t, 320<<20)
	f := startRESP(t, store, true, func(c *Config) {
		c.RESPProfiles = map[string]RESPProfile{"acme": respProfile(chunk32)}
	})
	body := make([]byte, chunk32)
	for i := range body {
		body[i] = byte(i*7 + i>>13)
	}
	auth := func(c *respClient) {
		t.Helper()
		c.write([]byte("*3\r\n$4\r\nAUTH\r\n$4\r\nacme\r\n$" + strconv.Itoa(len(secretA)) + "\r\n" + string(secretA) + "\r\n"))
		if got := c.reply(); got != "+OK\r\n" {
			t.Fatalf("AUTH: %q", got)
		}
	}
	c := dialRESP(t, f.addr)
	auth(c)
	key := mpKey(1)
	writeChunkSET(c, key, 1, body)
	if got := c.reply(); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	c.write([]byte("*2\r\n$3\r\nGET\r\n$" + strconv.Itoa(len(key)) + "\r\n" + key + "\r\n"))
	expectChunk(c, 1, body)
	c.write([]byte("*2\r\n$6\r\nEXISTS\r\n$" + strconv.Itoa(len(key)) + "\r\n" + key + "\r\n"))
	if got := c.reply(); got != ":1\r\n" {
		t.Fatalf("EXISTS: %q", got)
	}
	miss := mpKey(2)
	c.write([]byte("*2\r\n$3\r\nGET\r\n$" + strconv.Itoa(len(miss)) + "\r\n" + miss + "\r\n"))
	if got := c.reply(); got != "$-1\r\n" {
		t.Fatalf("GET miss: %q", got)
	}
	c.write([]byte("*2\r\n$6\r\nEXISTS\r\n$" + strconv.Itoa(len(miss)) + "\r\n" + miss + "\r\n"))
	if got := c.reply(); got != ":0\r\n" {
		t.Fatalf("EXISTS miss: %q", got)
	}
	c.write([]byte("*2\r\n$3\r\nDEL\r\n$" + strconv.Itoa(len(key)) + "\r\n" + key + "\r\n"))
	if got := c.reply(); got != ":1\r\n" {
		t.Fatalf("DEL: %q", got)
	}
	if got := c.do("GET", key); got != "$-1\r\n" {
		t.Fatalf("GET after DEL: %q", got)
	}

	// num_workers = 8: eight connections, each with one command
	// outstanding at a time, all at once.
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	workers := make([]*respClient, 8)
	for w := range workers {
		workers[w] = dialRESP(t, f.addr)
	}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := mpWorker(workers[w], w, body); err != nil {
				errs <- fmt.Sprintf("worker %d: %v", w, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// mpWorker is one C++ client worker: AUTH, SET, EXISTS, GET, a miss.
func mpWorker(c *respClient, w int, body []byte) error {
	step := func(name string, cmd []byte, want string) error {
		if _, err := c.nc.Write(cmd); err != nil {
			return err
		}
		got, err := c.replyErr()
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s: %q, want %q", name, got, want)
		}
		return nil
	}
	if err := step("AUTH", command([]byte("AUTH"), []byte("acme"), secretA), "+OK\r\n"); err != nil {
		return err
	}
	k := mpKey(100 + w)
	var hdr bytes.Buffer
	fmt.Fprintf(&hdr, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n", len(k), k, len(body))
	var tb [8]byte
	for i := range tb {
		tb[i] = byte(uint64(100+w) >> (8 * i))
	}
	hdr.Write(tb[:])
	if _, err := c.nc.Write(hdr.Bytes()); err != nil {
		return err
	}
	if _, err := c.nc.Write(body[8:]); err != nil {
		return err
	}
	if err := step("SET", []byte("\r\n"), "+OK\r\n"); err != nil {
		return err
	}
	if err := step("EXISTS", command([]byte("EXISTS"), []byte(k)), ":1\r\n"); err != nil {
		return err
	}
	if _, err := c.nc.Write(command([]byte("GET"), []byte(k))); err != nil {
		return err
	}
	if err := expectChunkErr(c, uint64(100+w), body); err != nil {
		return err
	}
	return step("GET miss", command([]byte("GET"), []byte(mpKey(200+w))), "$-1\r\n")
}
