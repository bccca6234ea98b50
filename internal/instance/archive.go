package instance

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/daytwo-dev/daytwo/internal/backup"
	"github.com/daytwo-dev/daytwo/internal/instanceapi"
	"github.com/daytwo-dev/daytwo/internal/wal"
)

// WAL archiving. Every instance archives (archive_mode = always): a
// replica ships the segments it received, so a failover leaves no gap in
// the archive even when the old primary died before it shipped its last
// ones (a known failure of archive_mode = on). The first copy stored wins;
// a replica's copies count as archived once one is stored (wal.PushCopy).
// archive_command runs `daytwo instance wal-archive`, which
// asks this manager over a socket in the private run directory and waits
// for its file; the manager's wal.Archiver has usually shipped it already,
// several files at a time, ahead of PostgreSQL's one-at-a-time calls. The
// command holds no credentials: only the manager reads them.

// archiveTimeout bounds the age of the newest WAL not yet archivable:
// PostgreSQL switches to a new segment after this long with any write.
const archiveTimeout = time.Minute

// ArchiveWait is how long archive_command waits for its file: longer than
// the manager tries one upload.
const ArchiveWait = wal.PushTimeout + 10*time.Second

// ArchiveSocket is where archive_command reaches the manager, in runDir.
func ArchiveSocket(runDir string) string { return filepath.Join(runDir, "wal.sock") }

// ArchivePath is the socket's HTTP path for archiving a file.
const ArchivePath = "/archive/"

// archive reads where WAL goes; nil when the operator asks for no archiving.
func (c *Config) archive() (*instanceapi.Archive, error) {
	a, err := readConfigJSON[instanceapi.Archive](c, instanceapi.ArchiveFile)
	if err != nil || a == nil {
		return nil, err
	}
	if (a.S3 == nil) == (a.Directory == "") {
		return nil, fmt.Errorf("invalid %s: set exactly one of s3 or directory", instanceapi.ArchiveFile)
	}
	return a, nil
}

// readConfigJSON reads the operator's file name, beside the parameters
// file, as JSON; nil when there is none.
func readConfigJSON[T any](c *Config, name string) (*T, error) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(c.ParametersFile), name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("invalid %s: %w", name, err)
	}
	return &v, nil
}

// storageOf opens the storage a names, with the credentials projected as
// files names them: the archive's (instanceapi.ArchiveFiles) or a
// replica's source's.
func (c *Config) storageOf(a *instanceapi.Archive, files instanceapi.StorageFiles) (backup.Storage, error) {
	if a.S3 == nil {
		return backup.NewDir(a.Directory), nil
	}
	var id, key string
	access := a.S3.S3Access
	if access.RoleARN != "" {
		access.WebIdentityTokenFile = filepath.Join(c.SecretsDir, files.Token)
	} else {
		// Static keys when projected; else the environment's credentials.
		var err error
		if id, err = c.secret(files.AccessKeyID); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if key, err = c.secret(files.SecretAccessKey); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	ca := filepath.Join(c.SecretsDir, files.CA)
	if _, err := os.Stat(ca); err != nil {
		ca = ""
	}
	return backup.NewS3(backup.S3Config{Endpoint: a.S3.Endpoint, Bucket: a.S3.Bucket, Region: a.S3.Region,
		Insecure: a.S3.Insecure, AccessKeyID: id, SecretAccessKey: key, CAFile: ca, S3Access: access})
}

// keysOf are the keys a storage's files are sealed and encrypted with,
// projected as files names them: none the operator does not project
// (files are then stored unsealed, or in clear).
func (c *Config) keysOf(files instanceapi.StorageFiles) backup.Keys {
	var keys backup.Keys
	if k, err := c.secret(files.SeriesKey); err == nil {
		keys.Seal = []byte(k)
	}
	if k, err := c.secret(files.EncryptionKey); err == nil {
		keys.Encrypt = []byte(k)
	}
	return keys
}

// archivingSelf is this binary's path, for the commands postgres runs to
// reach the manager, when the operator asks for WAL archiving.
func (c *Config) archivingSelf() (string, bool) {
	if a, err := c.archive(); err != nil || a == nil {
		return "", false
	}
	self, err := os.Executable()
	return self, err == nil
}

// archiveSettings are the managed settings that archive through this
// manager, or none.
func (c *Config) archiveSettings() string {
	self, ok := c.archivingSelf()
	if !ok {
		return ""
	}
	return fmt.Sprintf("archive_mode = always\narchive_command = '%s instance wal-archive --socket %s %%f'\narchive_timeout = %d\n",
		self, ArchiveSocket(c.RunDir), int(archiveTimeout.Seconds()))
}

// startWAL ships WAL while ctx lasts, when archive is set and the
// operator asks for archiving, and answers archive_command and a
// recovery's restore_command on the socket.
func (m *Manager) startWAL(ctx context.Context, archive bool) error {
	a, err := m.cfg.archive()
	if err != nil {
		return fmt.Errorf("failed to start archiving WAL: %w", err)
	}
	if !archive {
		a = nil
	}
	if a == nil && m.recovery == nil && m.source == nil {
		return nil
	}
	var archiver *wal.Archiver
	if a != nil {
		st, err := m.cfg.storageOf(a, instanceapi.ArchiveFiles)
		if err != nil {
			return fmt.Errorf("failed to start archiving WAL: %w", err)
		}
		keys := m.cfg.keysOf(instanceapi.ArchiveFiles)
		if err := backup.CheckKeys(keys); err != nil {
			return fmt.Errorf("failed to start archiving WAL: %w", err)
		}
		archiver = &wal.Archiver{Storage: st, Prefix: a.Prefix, Keys: keys, WALDir: filepath.Join(m.cfg.PGData, "pg_wal"),
			Parallel: cmp.Or(a.Parallel, 4), Log: m.log.WithName("wal"),
			Replica: func() bool { return m.role() == instanceapi.RoleReplica }}
		archiver.Claim = func(ctx context.Context) error {
			out, err := m.controlData(ctx, m.cfg.PGData)
			if err != nil {
				return err
			}
			return wal.ClaimArchive(ctx, st, a.Prefix, parseControlData(out)["Database system identifier"], m.cfg.Pod)
		}
		m.shared.mu.Lock()
		m.shared.archiver = archiver
		// One try per file: a replica that cannot reach the archive
		// streams or waits, it never stalls on storage.
		m.shared.standbyWAL = &wal.Restorer{Storage: st, Prefix: a.Prefix, Keys: keys, Dir: filepath.Clean(m.cfg.PGData) + ".standby-wal",
			Ahead: 4, Retry: time.Millisecond}
		m.shared.mu.Unlock()
	}
	if err := os.MkdirAll(m.cfg.RunDir, 0o700); err != nil {
		return fmt.Errorf("failed to create %s: %w", m.cfg.RunDir, err)
	}
	sock := ArchiveSocket(m.cfg.RunDir)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", sock, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+ArchivePath+"{name}", func(w http.ResponseWriter, r *http.Request) {
		if archiver == nil {
			http.Error(w, "this instance does not archive WAL", http.StatusServiceUnavailable)
			return
		}
		if err := archiver.Archive(r.Context(), r.PathValue("name")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST "+RestorePath+"{name}", m.handleRestoreWAL)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if archiver != nil {
		go func() {
			// A bucket that does not exist yet is made, as a first backup
			// run does: archiving starts before any base backup.
			bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := backup.EnsureBucket(bctx, archiver.Storage); err != nil {
				m.log.Error(err, "Failed to make sure the archive's bucket exists")
			}
		}()
		go archiver.Run(ctx)
		m.watchPromotions(ctx, archiver.Storage, a.Prefix)
		m.log.Info("Archiving WAL", "prefix", a.Prefix, "parallel", archiver.Parallel)
	}
	return nil
}

// AskToArchive is archive_command's side: it asks the manager on socket to
// archive name and waits for the answer.
func AskToArchive(ctx context.Context, socket, name string) error {
	return askSocket(ctx, socket, ArchivePath+name, "")
}

// AskToRestore is restore_command's side: it asks the manager on socket to
// restore name to dest and waits. It returns wal.ErrNotArchived when the
// archive does not hold name.
func AskToRestore(ctx context.Context, socket, name, dest string) error {
	return askSocket(ctx, socket, RestorePath+name, dest)
}

func askSocket(ctx context.Context, socket, path, body string) error {
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://manager"+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("the instance manager did not answer: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusNotFound:
		return fmt.Errorf("%s: %w", strings.TrimSpace(string(msg)), wal.ErrNotArchived)
	default:
		return fmt.Errorf("%s failed: %s", strings.TrimPrefix(path, "/"), strings.TrimSpace(string(msg)))
	}
}

// archiveStatus is the API's view of the archiver's counters.
func archiveStatus(s wal.Stats) *instanceapi.ArchiveStatus {
	out := &instanceapi.ArchiveStatus{Archived: s.Archived, Failed: s.Failed, LastArchived: s.LastArchived, LastError: s.LastError}
	if !s.LastArchivedTime.IsZero() {
		out.LastArchivedTime = &s.LastArchivedTime
	}
	if !s.LastErrorTime.IsZero() {
		out.LastErrorTime = &s.LastErrorTime
	}
	return out
}
