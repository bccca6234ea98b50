package backup

import (
	"cmp"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Compression algorithms of a logical backup. The compression runs in Go on
// the stream pg_dump writes uncompressed, so it is not bound to pg_dump's
// single-threaded gzip. An empty algorithm in a manifest means the backup
// predates the setting: pg_dump compressed it itself, and pg_restore reads
// it as stored.
const (
	CompressionNone = "none"
	CompressionGzip = "gzip"
	CompressionZstd = "zstd"
)

// Compression is how a logical backup is compressed: an algorithm and a
// level (zero means the algorithm's default).
type Compression struct {
	Algorithm string
	Level     int
}

// DefaultCompression is zstd at its fastest level: measured here
// (make bench-backup), it stores about gzip's size (0.3 to 0.9 of what
// pg_dump -Fc stores) at up to four times pg_dump's speed.
var DefaultCompression = Compression{Algorithm: CompressionZstd, Level: 1}

// Check says what is wrong with c, naming the level ranges.
func (c Compression) Check() error {
	switch c.Algorithm {
	case CompressionNone:
		if c.Level != 0 {
			return fmt.Errorf("compression level %d: none takes no level", c.Level)
		}
	case CompressionGzip:
		if c.Level < 0 || c.Level > 9 {
			return fmt.Errorf("compression level %d: gzip takes 1 to 9", c.Level)
		}
	case CompressionZstd:
		if c.Level < 0 || c.Level > 22 {
			return fmt.Errorf("compression level %d: zstd takes 1 to 22", c.Level)
		}
	default:
		return fmt.Errorf("compression %q: want none, gzip or zstd", c.Algorithm)
	}
	return nil
}

// writer compresses what is written to it into w; Close flushes the end.
func (c Compression) writer(w io.Writer) (io.WriteCloser, error) {
	switch c.Algorithm {
	case CompressionNone:
		return nopWriteCloser{w}, nil
	case CompressionGzip:
		level := c.Level
		if level == 0 {
			level = gzip.DefaultCompression
		}
		return gzip.NewWriterLevel(w, level)
	case CompressionZstd:
		return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(cmp.Or(c.Level, 1))))
	}
	return nil, c.Check()
}

// decompress reads what algorithm compressed from r. The readers decode in
// the caller's goroutine, so once they are closed nothing reads r behind the
// caller's back.
func decompress(algorithm string, r io.Reader) (io.ReadCloser, error) {
	switch algorithm {
	case "", CompressionNone:
		return io.NopCloser(r), nil
	case CompressionGzip:
		return gzip.NewReader(r)
	case CompressionZstd:
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	}
	return nil, fmt.Errorf("the backup is compressed with %q, which this daytwo does not know", algorithm)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
