package tier

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpucache/gpucache/api/identity"
	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/cold/crypt"
	"github.com/gpucache/gpucache/internal/cold/pack"
	"github.com/gpucache/gpucache/internal/cold/refill"
	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
	"github.com/gpucache/gpucache/internal/security/seal"
	"github.com/gpucache/gpucache/internal/testfix"
)

const encBlock = 4096

// fp16Like is a compressible block shaped like fp16 KV: a slowly varying
// low byte and a constant high byte per value.
func fp16Like(k identity.BlockKey) []byte {
	b := make([]byte, encBlock)
	for i := range b {
		if i%2 == 1 {
			b[i] = 0x3c
		} else {
			b[i] = k[i/256%32] + byte(i/64)
		}
	}
	return b
}

// writeEncoded writes n chained fp16Like blocks from token seed behind
// (writeChain) and returns their keys.
func writeEncoded(t *testing.T, tr *Tier, ns identity.Namespace, n int, seed uint32) []identity.BlockKey {
	t.Helper()
	_, keys := writeChain(t, tr, ns, n, seed, fp16Like)
	return keys
}

// readObject returns the whole object key of store.
func readObject(t *testing.T, store cold.Store, key string) []byte {
	t.Helper()
	info, err := store.Head(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, info.Size)
	if err := store.RangeGet(context.Background(), key, 0, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// manifestOf returns the decoded manifest the pointer of key names.
func manifestOf(t *testing.T, store cold.Store, ns identity.Namespace, key identity.BlockKey) (string, *pack.Manifest) {
	t.Helper()
	d, _ := ns.Digest()
	ptr, err := pack.DecodePointer(readObject(t, store, pack.PointerKey(d, key)))
	if err != nil {
		t.Fatal(err)
	}
	m, err := pack.OpenManifest(ptr.ManifestKey, readObject(t, store, ptr.ManifestKey))
	if err != nil {
		t.Fatal(err)
	}
	return ptr.ManifestKey, m
}

func expectHits(t *testing.T, tr *Tier, ns identity.Namespace, keys []identity.BlockKey) {
	t.Helper()
	for i, k := range keys {
		dst := make([]byte, encBlock)
		if n, res, err := tr.Refill(context.Background(), ns, k, dst); !res.Hit || n != encBlock || !bytes.Equal(dst, fp16Like(k)) {
			t.Fatalf("block %d: %d %v %v", i, n, res, err)
		}
	}
}

// expectMiss refills k and wants a clean miss (n 0, dst untouched) with
// reason and exactly one integrity event of kind naming keyID.
func expectMiss(t *testing.T, tr *Tier, ev *events, ns identity.Namespace, k identity.BlockKey, reason refill.Reason, kind, keyID string) error {
	t.Helper()
	dst := bytes.Repeat([]byte{0xAA}, encBlock)
	n, res, err := tr.Refill(context.Background(), ns, k, dst)
	if res.Hit || res.Reason != reason || n != 0 {
		t.Fatalf("refill %s: %d %v %v, want a miss (%v)", k, n, res, err, reason)
	}
	if reason == refill.KeyUnavailable && !bytes.Equal(dst, bytes.Repeat([]byte{0xAA}, encBlock)) {
		t.Fatal("dst touched by a miss before the payload read")
	}
	if reason == refill.Corrupt && bytes.Contains(dst, fp16Like(k)[:64]) {
		t.Fatal("plaintext left in dst after a miss")
	}
	evs := ev.take()
	d, _ := ns.Digest()
	if len(evs) != 1 || evs[0].Kind != kind || evs[0].KeyID != keyID || evs[0].Namespace != d.String() || evs[0].Key != k.String() {
		t.Fatalf("events %+v, want one %s naming %q", evs, kind, keyID)
	}
	return err
}

// runEncrypted is the encryption-at-rest scenario on one store: writes
// are encrypted (and compressed where it pays) under the current key and
// sealed; a rotation keeps the old key's blocks readable through the
// grace period and not after; tampering with stored ciphertext is a miss;
// a reader with the wrong secret, or with no cipher keyring, gets misses
// with events; every miss is clean. The keyrings read clk.
func runEncrypted(t *testing.T, store cold.Store, clk clock) {
	ck := crypt.New(clk.Now)
	if err := ck.Add("c1", bytes.Repeat([]byte{1}, 32), clk.Now()); err != nil {
		t.Fatal(err)
	}
	sk := seal.New(clk.Now)
	if err := sk.Add("s1", bytes.Repeat([]byte{9}, 32), clk.Now()); err != nil {
		t.Fatal(err)
	}
	z, err := crypt.NewZstd()
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	tr := newTier(t, store, func(c *Config) { c.Crypt, c.Compress, c.Keyring, c.OnIntegrity = ck, z, sk, ev.on })
	ns := testfix.TinyNamespace("acme")

	old := writeEncoded(t, tr, ns, 4, 0)
	mk, m := manifestOf(t, store, ns, old[0])
	if !m.Encrypted() || m.CipherKey() != "c1" || !m.Sealed() {
		t.Fatalf("manifest %s: encrypted %v key %q sealed %v", mk, m.Encrypted(), m.CipherKey(), m.Sealed())
	}
	obj := readObject(t, store, m.PackKey)
	for i, k := range old {
		if bytes.Contains(obj, fp16Like(k)[:64]) {
			t.Fatalf("block %d plaintext visible in the stored pack", i)
		}
	}
	if r, _ := m.Find(old[0]); r.Codec != pack.CodecZstd || r.Length >= r.Size {
		t.Fatalf("compressible block stored as codec %d, %d bytes for %d", r.Codec, r.Length, r.Size)
	}
	expectHits(t, tr, ns, old)

	const grace = time.Hour
	if err := ck.Rotate("c2", bytes.Repeat([]byte{2}, 32), grace); err != nil {
		t.Fatal(err)
	}
	fresh := writeEncoded(t, tr, ns, 4, 10000)
	if _, m2 := manifestOf(t, store, ns, fresh[0]); m2.CipherKey() != "c2" {
		t.Fatalf("after rotation new packs use %q, want c2", m2.CipherKey())
	}
	clk.Advance(grace - time.Second)
	expectHits(t, tr, ns, old)
	expectHits(t, tr, ns, fresh)
	if evs := ev.take(); len(evs) != 0 {
		t.Fatalf("events within grace: %+v", evs)
	}

	// Tamper with one stored ciphertext byte of fresh[1]: a miss; the other
	// blocks of that pack still refill.
	_, fm := manifestOf(t, store, ns, fresh[1])
	r, _ := fm.Find(fresh[1])
	body := readObject(t, store, fm.PackKey)
	body[r.Offset+pack.NonceLen+3] ^= 0x01
	if err := store.Put(context.Background(), fm.PackKey, body, cold.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	err = expectMiss(t, tr, ev, ns, fresh[1], refill.Corrupt, refill.IntegrityDecrypt, "c2")
	if !errors.Is(err, pack.ErrDecrypt) || !errors.Is(err, cold.ErrCorrupt) {
		t.Fatalf("tampered block: %v", err)
	}
	expectHits(t, tr, ns, []identity.BlockKey{fresh[0], fresh[2], fresh[3]})

	// The grace period ends: c1's blocks are misses with an event naming
	// c1 (their manifests are cached; the key is checked on every refill).
	clk.Advance(time.Second)
	for _, k := range old {
		err := expectMiss(t, tr, ev, ns, k, refill.KeyUnavailable, refill.IntegrityKeyUnavailable, "c1")
		if !errors.Is(err, pack.ErrKeyUnavailable) || !errors.Is(err, crypt.ErrExpiredKey) {
			t.Fatalf("expired key: %v", err)
		}
	}
	expectHits(t, tr, ns, []identity.BlockKey{fresh[0], fresh[2]})

	// A reader whose c2 is another secret (a wrong key file): a miss
	// with decrypt_failed. A reader with no cipher keyring: a miss with
	// cipher_key_unavailable.
	wrong := crypt.New(clk.Now)
	if err := wrong.Add("c2", bytes.Repeat([]byte{3}, 32), clk.Now()); err != nil {
		t.Fatal(err)
	}
	wev := &events{}
	wr := newTier(t, store, func(c *Config) { c.Crypt, c.Keyring, c.OnIntegrity = wrong, sk, wev.on })
	expectMiss(t, wr, wev, ns, fresh[0], refill.Corrupt, refill.IntegrityDecrypt, "c2")
	nev := &events{}
	nr := newTier(t, store, func(c *Config) { c.Keyring, c.OnIntegrity = sk, nev.on })
	expectMiss(t, nr, nev, ns, fresh[0], refill.KeyUnavailable, refill.IntegrityKeyUnavailable, "c2")
}

// clock is what runEncrypted reads and moves: the bubble's clock, or a
// manual one.
type clock interface {
	Now() time.Time
	Advance(d time.Duration)
}

// bubbleClock is the clock of a testing/synctest bubble: time.Sleep
// advances it at once.
type bubbleClock struct{}

func (bubbleClock) Now() time.Time          { return time.Now() }
func (bubbleClock) Advance(d time.Duration) { time.Sleep(d) }

func TestEncryptionAtRestOnFS(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs, err := cold.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		runEncrypted(t, fs, bubbleClock{})
	})
}

// TestEncryptionAtRestOnRealS3 cannot run in a synctest bubble: the S3
// client's HTTP connections to versitygw are real sockets, whose
// goroutines outlive any bubble. The keyrings read a manual clock instead.
func TestEncryptionAtRestOnRealS3(t *testing.T) {
	runEncrypted(t, s3test.NewStore(t, "crypt/"), testfix.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
}

// Packs written before encryption was turned on (unencrypted v3) stay
// readable by a tier that encrypts, and encrypted packs stay readable
// after compression is turned off.
func TestUnencryptedPacksStayReadable(t *testing.T) {
	store := cold.NewMem()
	plain := newTier(t, store, nil)
	ns := testfix.TinyNamespace("acme")
	before := writeEncoded(t, plain, ns, 3, 0)
	if _, m := manifestOf(t, store, ns, before[0]); m.Encrypted() || !m.Plain(m.Ranges[0]) {
		t.Fatal("a tier without options wrote an encoded pack")
	}
	ck := crypt.New(nil)
	if err := ck.Add("c1", bytes.Repeat([]byte{1}, 32), time.Time{}); err != nil {
		t.Fatal(err)
	}
	enc := newTier(t, store, func(c *Config) { c.Crypt = ck })
	expectHits(t, enc, ns, before)
	after := writeEncoded(t, enc, ns, 3, 5000)
	expectHits(t, enc, ns, after)
	if _, m := manifestOf(t, store, ns, after[0]); !m.Encrypted() || m.Ranges[0].Codec != pack.CodecRaw {
		t.Fatalf("encrypted %v codec %d", m.Encrypted(), m.Ranges[0].Codec)
	}
	if !strings.HasPrefix(ck.String(), "crypt.Keyring{") {
		t.Fatal(ck.String())
	}
}
