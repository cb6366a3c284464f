package resp

import (
	"errors"
	"testing"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want Key
	}{
		{"meta-llama/Llama-3-8B@0000000c@0@a1b2c3d4", Key{Kind: KeyMP, Model: []byte("meta-llama/Llama-3-8B"), KVRank: 12, HasGroup: true, ChunkHash: []byte("a1b2c3d4"), Layer: -1}},
		{"m@00000001@1f@abcd@tenant-a", Key{Kind: KeyMP, Model: []byte("m"), KVRank: 1, Group: 31, HasGroup: true, ChunkHash: []byte("abcd"), Salt: []byte("tenant-a"), Layer: -1}},
		{"m@00000002@abcd", Key{Kind: KeyMP, Model: []byte("m"), KVRank: 2, ChunkHash: []byte("abcd"), Layer: -1}},
		{"m@00000002@abcd@salt-x", Key{Kind: KeyMP, Model: []byte("m"), KVRank: 2, ChunkHash: []byte("abcd"), Salt: []byte("salt-x"), Layer: -1}},
		{"llama@4@1@-1f2e@halfkv_bytes", Key{Kind: KeyInProcess, Model: []byte("llama"), WorldSize: 4, WorkerID: 1, ChunkHash: []byte("-1f2e"), DType: []byte("half"), Layer: -1, Suffix: SuffixKVBytes}},
		{"llama@1@0@ab@bfloat16@3@user%alice@x%ymetadata", Key{Kind: KeyInProcess, Model: []byte("llama"), WorldSize: 1, ChunkHash: []byte("ab"), DType: []byte("bfloat16"), Layer: 3, Tags: []byte("user%alice@x%y"), Suffix: SuffixMetadata}},
	} {
		got, err := ParseKey([]byte(tc.key))
		if err != nil {
			t.Fatalf("%s: %v", tc.key, err)
		}
		if !equalKey(got, tc.want) {
			t.Fatalf("%s: %+v, want %+v", tc.key, got, tc.want)
		}
	}
}

func equalKey(a, b Key) bool {
	return a.Kind == b.Kind && string(a.Model) == string(b.Model) && a.KVRank == b.KVRank && a.Group == b.Group &&
		a.HasGroup == b.HasGroup && string(a.Salt) == string(b.Salt) && a.WorldSize == b.WorldSize && a.WorkerID == b.WorkerID &&
		string(a.DType) == string(b.DType) && a.Layer == b.Layer && string(a.Tags) == string(b.Tags) && a.Suffix == b.Suffix &&
		string(a.ChunkHash) == string(b.ChunkHash)
}

func TestParseKeyRefuses(t *testing.T) {
	for _, k := range []string{
		"key:000000000042", "", "@00000000@ab", "m@0000000@ab", "m@0000000g@ab", "m@00000000@zz",
		"m@00000000@1@2@3@4", "m@1@0@abkv_bytes", "m@0@0@ab@halfkv_bytes", "m@2@2@ab@halfmetadata",
		"m@1@0@xy@halfkv_bytes", "m@1@0@ab@kv_bytes", "m@1@0@ab@half@novaluekv_bytes", "m@00000000@ab@",
	} {
		if _, err := ParseKey([]byte(k)); !errors.Is(err, ErrKey) {
			t.Errorf("%q: %v, want ErrKey", k, err)
		}
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"meta-llama/Llama-3-8B@0000000c@0@a1b2c3d4",
		"m@00000001@1f@abcd@tenant-a",
		"llama@1@0@ab@bfloat16@3@user%alicemetadata",
		"llama@4@1@-1f2e@halfkv_bytes",
		"key:000000000042",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		k, err := ParseKey(in)
		if err != nil {
			if !errors.Is(err, ErrKey) {
				t.Fatalf("error %v does not wrap ErrKey", err)
			}
			return
		}
		if len(k.Model) == 0 || len(k.ChunkHash) == 0 {
			t.Fatalf("parsed %q without a model or hash", in)
		}
		if k.Kind == KeyInProcess && k.WorkerID >= k.WorldSize {
			t.Fatalf("worker %d of %d", k.WorkerID, k.WorldSize)
		}
	})
}
