// Package s3store is a cold.Store on any S3-compatible object store: RustFS
// (production), MinIO, SeaweedFS, versitygw, AWS S3.
//
// # Client library
//
// It uses github.com/aws/aws-sdk-go-v2/service/s3. Measured for this repo
// (Go 1.26, November 2025 versions): service/s3 v1.114.10 adds 11 modules to
// the build and 11 to the module graph, all from the aws organisation, with
// no third-party code. minio-go v7.4.1 adds 19 modules to the build and about
// 230 to the module graph (its go.mod carries linter tooling). Both can send
// "If-None-Match: *"; the SDK has it as a typed field
// (PutObjectInput.IfNoneMatch). versitygw, our test server, is built on the
// same SDK.
//
// # Mapping
//
// A key k is stored as Config.Prefix+k in Config.Bucket. Errors map onto the
// cold sentinels:
//
//	404, NoSuchKey, NotFound          cold.ErrNotFound (Delete: success)
//	412 PreconditionFailed            cold.ErrExists
//	416 InvalidRange, short body      cold.ErrRange
//	401/403, AccessDenied, bad keys   ErrAccessDenied
//	  (versitygw answers an unknown access key with 404 XAdminUserNotFound:
//	  mapped too, except on HEAD, which has no body to carry the code and
//	  so reads as ErrNotFound; Check at startup catches it)
//	5xx, 408, 409, 429, NoSuchBucket,
//	no response (network, timeout)    cold.ErrUnavailable
//
// A canceled caller context returns its error (context.Canceled), not
// ErrUnavailable; the per-operation Config.Timeout expiring is
// ErrUnavailable wrapping context.DeadlineExceeded. Every error also wraps
// the SDK's, so the HTTP status and request ID stay visible.
//
// # Conditional Put
//
// IfNoneMatch sends "If-None-Match: *", which AWS S3, MinIO and versitygw
// (v1.8.0, under a per-key publish lock) evaluate atomically. For a server
// that ignores the header, set Config.EmulateIfNoneMatch: Put then does Head
// and a plain Put, which races (two writers can both see "missing" and both
// write; the later wins). Content-addressed keys make that race harmless
// for the cold tier's objects, but not for anything that relies on
// first-writer-wins.
//
// The SDK retries a failed Put. If a conditional Put committed but its
// response was lost, the retry answers 412 and the caller sees ErrExists
// for a write that was its own; with content-addressed keys both mean "the
// object is there". When a conditional Put ends without any HTTP answer (a
// broken connection: some servers refuse an existing key before reading a
// large body and drop the connection), Put asks Head, and an existing key
// is ErrExists too.
package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/gpucache/gpucache/internal/cold"
	"github.com/gpucache/gpucache/internal/degrade"
)

// ErrAccessDenied: the server rejected the credentials or the request's
// permissions. Retrying does not help; check AccessKey, SecretKey, Region
// and the bucket policy.
var ErrAccessDenied = errors.New("gpucache/cold/s3store: access denied")

// Config configures a Store. Start from Default().
type Config struct {
	// Endpoint is the server's base URL, e.g. "http://127.0.0.1:7070".
	// Required.
	Endpoint string
	// Region signs requests. Default "us-east-1".
	Region string
	// Bucket holds the objects. Required.
	Bucket string
	// Prefix is prepended to every key; "" or ending in "/", e.g.
	// "gpucache/". Default "".
	Prefix string
	// PathStyle addresses objects as <endpoint>/<bucket>/<key>, which every
	// S3-compatible server supports, instead of <bucket>.<host>/<key>.
	// Default true (Default()); note a zero Config means false.
	PathStyle bool
	// AccessKey and SecretKey sign requests. Default: the environment
	// variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
	// AWS_SESSION_TOKEN), used only when both fields are empty.
	AccessKey string
	SecretKey string
	// Timeout bounds each operation, retries and body included (each page,
	// for List). Default 30s.
	Timeout time.Duration
	// MaxAttempts bounds the tries of one operation; the SDK retries 5xx,
	// throttling and network errors with jittered backoff. Default 3; 1
	// disables retries.
	MaxAttempts int
	// ListPageSize is the keys per ListObjectsV2 request, 1..1000. Default
	// 1000.
	ListPageSize int
	// CreateBucket makes New create Bucket if it is missing. Default false.
	CreateBucket bool
	// EmulateIfNoneMatch replaces the atomic conditional Put with Head then
	// Put, for servers that ignore If-None-Match. See the package doc for
	// the race. Default false.
	EmulateIfNoneMatch bool

	sessionToken string // AWS_SESSION_TOKEN, when the keys came from the environment
}

// Default returns a Config with every default filled in and the required
// fields (Endpoint, Bucket) empty.
func Default() Config {
	return Config{
		Region:       "us-east-1",
		PathStyle:    true,
		Timeout:      30 * time.Second,
		MaxAttempts:  3,
		ListPageSize: 1000,
	}
}

// withDefaults fills zero fields (except PathStyle, whose zero is a valid
// choice) and the credentials from the environment.
func (c Config) withDefaults() Config {
	d := Default()
	if c.Region == "" {
		c.Region = d.Region
	}
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.ListPageSize == 0 {
		c.ListPageSize = d.ListPageSize
	}
	if c.AccessKey == "" && c.SecretKey == "" {
		c.AccessKey = os.Getenv("AWS_ACCESS_KEY_ID")
		c.SecretKey = os.Getenv("AWS_SECRET_ACCESS_KEY")
		c.sessionToken = os.Getenv("AWS_SESSION_TOKEN")
	}
	return c
}

// Validate reports the first problem with c (after defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := validEndpoint(c.Endpoint); err != nil {
		return err
	}
	switch {
	case c.Bucket == "":
		return errors.New("s3store: Bucket is required")
	case c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("s3store: Prefix %q must end in /", c.Prefix)
	case c.AccessKey == "" || c.SecretKey == "":
		return errors.New("s3store: no credentials: set AccessKey and SecretKey, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	case c.Timeout < 0:
		return fmt.Errorf("s3store: Timeout %v is negative", c.Timeout)
	case c.MaxAttempts < 1:
		return fmt.Errorf("s3store: MaxAttempts %d, want >= 1", c.MaxAttempts)
	case c.ListPageSize < 1 || c.ListPageSize > 1000:
		return fmt.Errorf("s3store: ListPageSize %d, want 1..1000", c.ListPageSize)
	}
	if c.Prefix != "" {
		if err := cold.ValidKey(strings.TrimSuffix(c.Prefix, "/")); err != nil {
			return fmt.Errorf("s3store: Prefix: %w", err)
		}
	}
	return nil
}

// validEndpoint checks that endpoint is an http(s)://host[:port] URL.
func validEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	switch {
	case endpoint == "":
		return errors.New("s3store: Endpoint is required")
	case err != nil:
		return fmt.Errorf("s3store: Endpoint: %w", err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("s3store: Endpoint %q: want http(s)://host[:port]", endpoint)
	}
	return nil
}

// Store is a cold.Store on an S3 bucket. It is safe for concurrent use.
// Close releases its idle connections.
type Store struct {
	client    *s3.Client
	transport *http.Transport
	bucket    string
	prefix    string
	timeout   time.Duration
	pageSize  int32
	emulate   bool
}

var (
	_ cold.Store      = (*Store)(nil)
	_ cold.Degradable = (*Store)(nil)
	_ cold.Teer       = (*Store)(nil)
)

// DegradeFaults implements cold.Degradable: the bucket refuses or cannot be
// reached (s3_unavailable), or answers too slowly (s3_slow). The two are the
// RustFS slow/unavailable hooks of the seed.
func (s *Store) DegradeFaults() []degrade.Fault {
	return []degrade.Fault{degrade.S3Unavailable, degrade.S3Slow}
}

// New returns a Store for cfg. It contacts the server only when
// cfg.CreateBucket is set; use Check to probe reachability.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: min(cfg.Timeout, 10*time.Second), KeepAlive: 30 * time.Second}).DialContext
	// The cold tier issues many concurrent ranged reads to one host; the
	// default of 2 idle connections per host would churn connections.
	tr.MaxIdleConnsPerHost = 64
	creds := aws.Credentials{
		AccessKeyID:     cfg.AccessKey,
		SecretAccessKey: cfg.SecretKey,
		SessionToken:    cfg.sessionToken,
		Source:          "gpucache s3store config",
	}
	client := s3.New(s3.Options{
		Region:       cfg.Region,
		BaseEndpoint: aws.String(cfg.Endpoint),
		UsePathStyle: cfg.PathStyle,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return creds, nil
		}),
		HTTPClient:       &http.Client{Transport: tr},
		RetryMaxAttempts: cfg.MaxAttempts,
		RetryMode:        aws.RetryModeStandard,
		// Only what S3 requires: newer SDK defaults add CRC trailers that
		// some S3-compatible servers reject. Integrity is the cold tier's
		// own job (checksums in manifests).
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	s := &Store{
		client:    client,
		transport: tr,
		bucket:    cfg.Bucket,
		prefix:    cfg.Prefix,
		timeout:   cfg.Timeout,
		pageSize:  int32(cfg.ListPageSize),
		emulate:   cfg.EmulateIfNoneMatch,
	}
	if cfg.CreateBucket {
		if err := s.createBucket(ctx, cfg.Region); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// Close releases idle HTTP connections. The Store stays usable (new
// operations open new connections); call Close when done with it.
func (s *Store) Close() {
	s.transport.CloseIdleConnections()
}

func (s *Store) createBucket(ctx context.Context, region string) error {
	opCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	in := &s3.CreateBucketInput{Bucket: aws.String(s.bucket)}
	if region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(region),
		}
	}
	_, err := s.client.CreateBucket(opCtx, in)
	var owned *types.BucketAlreadyOwnedByYou
	if err == nil || errors.As(err, &owned) {
		return nil
	}
	return s.mapErr(ctx, "CreateBucket", s.bucket, err)
}

// Check probes the bucket with HeadBucket: nil when it exists and the
// credentials work.
func (s *Store) Check(ctx context.Context) error {
	opCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.client.HeadBucket(opCtx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err != nil && statusOf(err) == http.StatusNotFound {
		return fmt.Errorf("s3 HeadBucket %q: bucket does not exist: %w: %w", s.bucket, cold.ErrUnavailable, err)
	}
	return s.mapErr(ctx, "HeadBucket", s.bucket, err)
}

// objectKey checks key and returns the S3 key.
func (s *Store) objectKey(op, key string) (string, error) {
	if err := cold.ValidKey(key); err != nil {
		return "", fmt.Errorf("s3 %s: %w", op, err)
	}
	full := s.prefix + key
	if len(full) > cold.MaxKeyLen {
		return "", fmt.Errorf("s3 %s: %w: %d bytes with the store prefix, limit %d", op, cold.ErrInvalidKey, len(full), cold.MaxKeyLen)
	}
	return full, nil
}

// Put implements cold.Store. body is read during the call only.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts cold.PutOptions) error {
	full, err := s.objectKey(cold.OpPut, key)
	if err != nil {
		return err
	}
	if opts.IfNoneMatch && s.emulate {
		_, err := s.Head(ctx, key)
		switch {
		case err == nil:
			return fmt.Errorf("s3 Put %q (emulated If-None-Match): %w", key, cold.ErrExists)
		case !errors.Is(err, cold.ErrNotFound):
			return err
		}
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(full),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	if opts.IfNoneMatch && !s.emulate {
		in.IfNoneMatch = aws.String("*")
	}
	opCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err = s.client.PutObject(opCtx, in)
	if err != nil && opts.IfNoneMatch {
		if cerr := s.conditionalPutErr(ctx, key, err); cerr != nil {
			return cerr
		}
	}
	return s.mapErr(ctx, cold.OpPut, key, err)
}

// conditionalPutErr explains err, the failure of a Put with IfNoneMatch,
// when the server does not implement the condition or broke the
// connection over a key that exists; nil otherwise.
func (s *Store) conditionalPutErr(ctx context.Context, key string, err error) error {
	if statusOf(err) == http.StatusNotImplemented {
		return fmt.Errorf("s3 Put %q: the server does not implement If-None-Match (set EmulateIfNoneMatch): %w: %w",
			key, cold.ErrUnavailable, err)
	}
	if statusOf(err) == 0 && ctx.Err() == nil {
		// No HTTP answer: the connection broke. A server may refuse a
		// conditional Put of an existing key before reading a large body,
		// answer 412 and drop the connection (versitygw does, without
		// honouring Expect: 100-continue), which the client sees only as a
		// write error. If the key now exists, the precondition did fail (or
		// our own write landed): ErrExists either way.
		if _, herr := s.Head(ctx, key); herr == nil {
			return fmt.Errorf("s3 Put %q: the key exists (the connection broke before the answer: %v): %w", key, err, cold.ErrExists)
		}
	}
	return nil
}

// Head implements cold.Store.
func (s *Store) Head(ctx context.Context, key string) (cold.ObjectInfo, error) {
	full, err := s.objectKey(cold.OpHead, key)
	if err != nil {
		return cold.ObjectInfo{}, err
	}
	opCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	out, err := s.client.HeadObject(opCtx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)})
	if err != nil {
		return cold.ObjectInfo{}, s.mapErr(ctx, cold.OpHead, key, err)
	}
	return cold.ObjectInfo{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified)}, nil
}

// RangeGet implements cold.Store. It reads the body straight into dst with
// no intermediate buffer. An empty dst costs a HeadObject (HTTP cannot ask
// for zero bytes).
func (s *Store) RangeGet(ctx context.Context, key string, off int64, dst []byte) error {
	return s.rangeGet(ctx, key, off, dst, nil)
}

// RangeGetTee implements cold.Teer: it reads the body straight into dst and
// writes each piece to w as it arrives (cold.ReadTee), so a checksum over
// the range runs while the server is still sending the rest.
func (s *Store) RangeGetTee(ctx context.Context, key string, off int64, dst []byte, w io.Writer) error {
	return s.rangeGet(ctx, key, off, dst, w)
}

// rangeGet is RangeGet, and RangeGetTee when w is not nil.
func (s *Store) rangeGet(ctx context.Context, key string, off int64, dst []byte, w io.Writer) error {
	full, err := s.objectKey(cold.OpRangeGet, key)
	if err != nil {
		return err
	}
	if off < 0 {
		return fmt.Errorf("s3 RangeGet %q: offset %d: %w", key, off, cold.ErrRange)
	}
	if len(dst) == 0 {
		info, err := s.Head(ctx, key)
		if err != nil {
			return err
		}
		if off > info.Size {
			return fmt.Errorf("s3 RangeGet %q [%d, +0) of %d bytes: %w", key, off, info.Size, cold.ErrRange)
		}
		return nil
	}
	opCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	end := off + int64(len(dst)) - 1
	out, err := s.client.GetObject(opCtx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(full),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, end)),
	})
	if err != nil {
		return s.mapErr(ctx, cold.OpRangeGet, key, err)
	}
	defer out.Body.Close()
	// A range that starts inside the object but runs past its end comes
	// back short (206 with fewer bytes), not as 416.
	start, total, ok := parseContentRange(aws.ToString(out.ContentRange))
	switch {
	case !ok && !(off == 0 && aws.ToInt64(out.ContentLength) == int64(len(dst))):
		return fmt.Errorf("s3 RangeGet %q: server ignored the Range header (Content-Range %q)", key, aws.ToString(out.ContentRange))
	case ok && start != off:
		return fmt.Errorf("s3 RangeGet %q: asked for offset %d, got Content-Range %q", key, off, aws.ToString(out.ContentRange))
	case aws.ToInt64(out.ContentLength) < int64(len(dst)):
		return fmt.Errorf("s3 RangeGet %q [%d, +%d) of %d bytes: %w", key, off, len(dst), total, cold.ErrRange)
	}
	if w == nil {
		_, err = io.ReadFull(out.Body, dst)
	} else {
		err = cold.ReadTee(out.Body, key, dst, w)
	}
	if err != nil {
		return s.mapErr(ctx, cold.OpRangeGet, key, fmt.Errorf("reading body: %w", err))
	}
	return nil
}

// parseContentRange parses "bytes start-end/total" (total may be "*").
func parseContentRange(v string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, false
	}
	span, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	first, _, found := strings.Cut(span, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	total = -1
	if n, err := strconv.ParseInt(tot, 10, 64); err == nil {
		total = n
	}
	return start, total, true
}

// Delete implements cold.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	full, err := s.objectKey(cold.OpDelete, key)
	if err != nil {
		return err
	}
	opCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err = s.client.DeleteObject(opCtx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)})
	if err = s.mapErr(ctx, cold.OpDelete, key, err); errors.Is(err, cold.ErrNotFound) {
		return nil
	}
	return err
}

// List implements cold.Store with ListObjectsV2, one page at a time; S3
// returns keys in UTF-8 byte order, which is cold's lexical order. Timeout
// applies per page, so fn's running time does not count against it.
func (s *Store) List(ctx context.Context, prefix string, fn func(cold.ObjectInfo) error) error {
	if err := cold.ValidPrefix(prefix); err != nil {
		return fmt.Errorf("s3 List: %w", err)
	}
	pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.bucket),
		Prefix:  aws.String(s.prefix + prefix),
		MaxKeys: aws.Int32(s.pageSize),
	})
	for pages.HasMorePages() {
		page, err := s.listPage(ctx, pages)
		if err != nil {
			return s.mapErr(ctx, cold.OpList, prefix, err)
		}
		for _, obj := range page.Contents {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("s3 List %q: %w", prefix, err)
			}
			err := fn(cold.ObjectInfo{
				Key:      strings.TrimPrefix(aws.ToString(obj.Key), s.prefix),
				Size:     aws.ToInt64(obj.Size),
				Modified: aws.ToTime(obj.LastModified),
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) listPage(ctx context.Context, pages *s3.ListObjectsV2Paginator) (*s3.ListObjectsV2Output, error) {
	opCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return pages.NextPage(opCtx)
}

// statusOf returns the HTTP status of an SDK error, or 0 if no response
// came back.
func statusOf(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// mapErr turns an SDK error into one wrapping a cold sentinel (see the
// package doc). ctx is the caller's context, not the per-operation one.
func (s *Store) mapErr(ctx context.Context, op, key string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("s3 %s %q: %w", op, key, cerr)
	}
	status := statusOf(err)
	code := ""
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var kind error
	switch {
	case code == "NoSuchBucket":
		return fmt.Errorf("s3 %s %q: bucket %q does not exist: %w: %w", op, key, s.bucket, cold.ErrUnavailable, err)
	case status == http.StatusUnauthorized || status == http.StatusForbidden,
		code == "AccessDenied", code == "InvalidAccessKeyId", code == "SignatureDoesNotMatch",
		code == "XAdminUserNotFound": // versitygw's 404 for an unknown access key
		kind = ErrAccessDenied
	case code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound:
		kind = cold.ErrNotFound
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		kind = cold.ErrExists
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		kind = cold.ErrRange
	case status == 0, status >= 500, status == http.StatusRequestTimeout,
		status == http.StatusConflict, status == http.StatusTooManyRequests:
		kind = cold.ErrUnavailable
	default:
		return fmt.Errorf("s3 %s %q: %w", op, key, err)
	}
	return fmt.Errorf("s3 %s %q: %w: %w", op, key, kind, err)
}
