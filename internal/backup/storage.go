package backup

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/encrypt"

	"github.com/daytwo-dev/daytwo/internal/instanceapi"
)

// Storage is where backups live. Keys are slash-separated paths.
type Storage interface {
	// Put streams r to key; the object appears only when r is drained.
	// A reader with a Len method (bytes.Reader) has that many bytes left,
	// and no more are added while Put reads.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get reads key; a missing key is ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns every key under prefix.
	List(ctx context.Context, prefix string) ([]string, error)
	Delete(ctx context.Context, key string) error
	// Size returns the stored size of key, or ErrNotFound.
	Size(ctx context.Context, key string) (int64, error)
	// Modified returns when key was stored, or ErrNotFound.
	Modified(ctx context.Context, key string) (time.Time, error)
	// Create stores data at key only if nothing is there yet, in one
	// step that two writers cannot both win; else ErrExists.
	Create(ctx context.Context, key string, data []byte) error
}

// ErrNotFound means a key does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists means Create found its key taken.
var ErrExists = errors.New("already exists")

// S3Config says how to reach an S3-compatible bucket.
type S3Config struct {
	Endpoint, Bucket, Region     string
	AccessKeyID, SecretAccessKey string
	Insecure                     bool
	// CAFile, when set, holds PEM certificates trusted besides the
	// system's (or, in images without any, the roots the binary embeds):
	// a private CA's.
	CAFile string
	// PartSize bounds the memory of an upload of unknown length: PartSize
	// times Parallel bytes are buffered, and an object can hold at most
	// 10,000 parts.
	PartSize uint64
	Parallel uint
	// S3Access: without static keys, a web identity or the environment's
	// credentials; and the store's encryption.
	instanceapi.S3Access
}

// DefaultPartSize allows objects up to 10,000 x 64MiB = 625GiB.
const DefaultPartSize = 64 << 20

type s3Storage struct {
	client *minio.Client
	cfg    S3Config
	sse    encrypt.ServerSide
}

// NewS3 returns S3 storage; it does not contact the server.
func NewS3(cfg S3Config) (Storage, error) {
	if cfg.PartSize == 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 2
	}
	endpoint := strings.TrimPrefix(strings.TrimPrefix(cfg.Endpoint, "https://"), "http://")
	opts := &minio.Options{
		Secure: !cfg.Insecure && !strings.HasPrefix(cfg.Endpoint, "http://"),
		Region: cfg.Region,
	}
	t, err := minio.DefaultTransport(opts.Secure)
	if err != nil {
		return nil, err
	}
	if cfg.CAFile != "" {
		if t.TLSClientConfig.RootCAs, err = caPool(cfg.CAFile); err != nil {
			return nil, err
		}
	}
	opts.Transport = t
	if opts.Creds, err = s3Credentials(cfg, endpoint, opts.Secure, t); err != nil {
		return nil, err
	}
	sse, err := serverSideEncryption(cfg.S3Access)
	if err != nil {
		return nil, err
	}
	c, err := minio.New(endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("invalid S3 endpoint %q: %w", cfg.Endpoint, err)
	}
	return &s3Storage{client: c, cfg: cfg, sse: sse}, nil
}

// caPool is the system's roots (or, in images without any, the roots the
// binary embeds) and the certificates in caFile.
func caPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("failed to read the S3 CA file: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the S3 CA file %s holds no PEM certificate", caFile)
	}
	return roots, nil
}

func (s *s3Storage) Put(ctx context.Context, key string, r io.Reader) error {
	// A reader that knows how much is left (bytes.Reader, strings.Reader:
	// a WAL segment, a manifest) and fits in a part is stored in one
	// request, read from where it stands. Anything else is streamed as
	// parts of unknown length, each buffered (PartSize times Parallel).
	size := int64(-1)
	if l, ok := r.(interface{ Len() int }); ok && uint64(l.Len()) <= s.cfg.PartSize {
		size = int64(l.Len())
	}
	_, err := s.client.PutObject(ctx, s.cfg.Bucket, key, r, size, minio.PutObjectOptions{
		PartSize: s.cfg.PartSize, NumThreads: s.cfg.Parallel, ConcurrentStreamParts: s.cfg.Parallel > 1,
		ContentType: "application/octet-stream", ServerSideEncryption: s.sse,
	})
	if err != nil {
		return fmt.Errorf("failed to upload s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return nil
}

// Create implements Storage with a conditional write (If-None-Match: *),
// which S3 and MinIO decide atomically.
func (s *s3Storage) Create(ctx context.Context, key string, data []byte) error {
	opts := minio.PutObjectOptions{ContentType: "application/json", ServerSideEncryption: s.sse}
	opts.SetMatchETagExcept("*")
	_, err := s.client.PutObject(ctx, s.cfg.Bucket, key, bytes.NewReader(data), int64(len(data)), opts)
	if resp := minio.ToErrorResponse(err); resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed" {
		return fmt.Errorf("s3://%s/%s: %w", s.cfg.Bucket, key, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("failed to upload s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return nil
}

func (s *s3Storage) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to read s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	// GetObject is lazy; Stat surfaces a missing object now.
	if _, err := obj.Stat(); err != nil {
		_ = obj.Close()
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("s3://%s/%s: %w", s.cfg.Bucket, key, ErrNotFound)
		}
		return nil, fmt.Errorf("failed to read s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return obj, nil
}

func (s *s3Storage) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for obj := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("failed to list s3://%s/%s: %w", s.cfg.Bucket, prefix, obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	return keys, nil
}

func (s *s3Storage) Delete(ctx context.Context, key string) error {
	if err := s.client.RemoveObject(ctx, s.cfg.Bucket, key, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("failed to delete s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return nil
}

func (s *s3Storage) Size(ctx context.Context, key string) (int64, error) {
	info, err := s.stat(ctx, key)
	return info.Size, err
}

func (s *s3Storage) Modified(ctx context.Context, key string) (time.Time, error) {
	info, err := s.stat(ctx, key)
	return info.LastModified, err
}

func (s *s3Storage) stat(ctx context.Context, key string) (minio.ObjectInfo, error) {
	info, err := s.client.StatObject(ctx, s.cfg.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return info, fmt.Errorf("s3://%s/%s: %w", s.cfg.Bucket, key, ErrNotFound)
		}
		return info, fmt.Errorf("failed to stat s3://%s/%s: %w", s.cfg.Bucket, key, err)
	}
	return info, nil
}

// EnsureBucket creates the bucket when it does not exist (tests and first runs).
func EnsureBucket(ctx context.Context, st Storage) error {
	s, ok := st.(*s3Storage)
	if !ok {
		return nil
	}
	exists, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return fmt.Errorf("failed to look up bucket %s: %w", s.cfg.Bucket, err)
	}
	if exists {
		return nil
	}
	if err := s.client.MakeBucket(ctx, s.cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region}); err != nil {
		return fmt.Errorf("failed to create bucket %s: %w", s.cfg.Bucket, err)
	}
	return nil
}

// dirStorage keeps backups as files under a directory (a mounted volume).
type dirStorage struct{ root string }

// NewDir returns storage in directory root.
func NewDir(root string) Storage { return &dirStorage{root: root} }

func (d *dirStorage) path(key string) (string, error) {
	clean := filepath.Clean("/" + key)
	if clean == "/" {
		return "", fmt.Errorf("invalid key %q", key)
	}
	return filepath.Join(d.root, clean), nil
}

// Put writes to a temporary name and renames, so a reader never sees half a file.
func (d *dirStorage) Put(_ context.Context, key string, r io.Reader) error {
	return d.place(key, r, os.Rename)
}

// Create implements Storage: the file is written aside and linked into
// place, which fails if the name is taken.
func (d *dirStorage) Create(_ context.Context, key string, data []byte) error {
	err := d.place(key, bytes.NewReader(data), os.Link)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", key, ErrExists)
	}
	return err
}

// place writes r under a temporary name beside key's file, synced, and
// moves it into place with put (a rename replaces, a link does not).
func (d *dirStorage) place(key string, r io.Reader, put func(from, to string) error) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		return fmt.Errorf("failed to create %s: %w", filepath.Dir(p), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".partial-*")
	if err != nil {
		return fmt.Errorf("failed to create a file in %s: %w", filepath.Dir(p), err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := io.Copy(tmp, r); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("failed to write %s: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("failed to sync %s: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return put(tmp.Name(), p)
}

func (d *dirStorage) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	} else if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", key, err)
	}
	return f, nil
}

func (d *dirStorage) List(_ context.Context, prefix string) ([]string, error) {
	var keys []string
	err := filepath.WalkDir(d.root, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".partial-") {
			return nil
		}
		rel, _ := filepath.Rel(d.root, p)
		if key := filepath.ToSlash(rel); strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("failed to list %s: %w", d.root, err)
	}
	return keys, nil
}

func (d *dirStorage) Size(_ context.Context, key string) (int64, error) {
	info, err := d.stat(key)
	if err != nil {
		return 0, err
	}
	return info.Size(), nil
}

func (d *dirStorage) Modified(_ context.Context, key string) (time.Time, error) {
	info, err := d.stat(key)
	if err != nil {
		return time.Time{}, err
	}
	return info.ModTime(), nil
}

func (d *dirStorage) stat(key string) (fs.FileInfo, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to stat %s: %w", key, err)
	}
	return info, nil
}

func (d *dirStorage) Delete(_ context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("failed to delete %s: %w", key, err)
	}
	return nil
}
