package tier

import (
	"testing"

	"github.com/gpucache/gpucache/internal/cold/s3store/s3test"
)

// TestColdQuotaOnRealS3 is the paired quota test against a real S3 server
// (versitygw; skipped without it unless $CI is set): without a's quota
// nothing is deleted; with it a's own oldest packs go and every one of b's
// objects and blocks stays, counted by listing the bucket.
func TestColdQuotaOnRealS3(t *testing.T) {
	without := runColdQuota(t, s3test.NewStore(t, "without/"), false)
	if without.aRefills != 6 || without.bRefills != 3 || without.aObjects != 6*3 || without.bObjects != 3*3 {
		t.Fatalf("without a quota: %+v", without)
	}
	with := runColdQuota(t, s3test.NewStore(t, "with/"), true)
	if with.bRefills != 3 || with.bObjects != 3*3 || with.b.Bytes != without.b.Bytes || with.b.Evictions != 0 {
		t.Fatalf("with a's quota, b lost something: %+v", with)
	}
	if with.aRefills != 2 || with.aObjects != 2*3 || with.a.Evictions != 4 || with.a.Bytes > with.a.Quota {
		t.Fatalf("with a's quota: %+v; want a's 2 newest blocks, 6 objects, 4 evictions", with)
	}
}
